"""Three-way merge for ``port``: ``git merge-file ours base theirs`` on text (merge3, from the
breezy project, imported on first use, so importing this module costs the commands that never
merge nothing). Wherever nothing changed, it gives back exactly the text it was given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .text import (
    MARK_BASE,
    MARK_END,
    MARK_MID,
    MARK_START,
    marker_line,
    newline_of,
    split_lines,
    terminated,
)


@dataclass(frozen=True)
class MergeResult:
    text: str
    conflicts: int  # number of conflict blocks in ``text`` (0: a clean merge)


def merge_three(
    base: str,
    theirs: str,
    ours: str,
    *,
    labels: tuple[str, str, str] = ("ours", "base", "theirs"),
    show_base: bool = False,
) -> MergeResult:
    """``git merge-file ours base theirs``: ``ours`` plus the change from ``base`` to ``theirs``.

    For ``port``: base = the pristine file of the release the patch was made for, theirs = that
    file patched, ours = the other release's pristine file. ``labels`` name ours, base and theirs
    in the markers, in ``git merge-file -L`` order. Conflicts read ``<<<<<<< ours`` / ours' lines
    / (with ``show_base``: ``||||||| base`` / base's lines) / ``=======`` / theirs' lines /
    ``>>>>>>> theirs``. Without ``show_base``, lines both sides agree on at the top and bottom of a
    conflict are moved out of it (git's default "zealous" level).
    """
    import difflib

    from merge3 import Merge3

    class Matcher(difflib.SequenceMatcher[str]):
        # Without autojunk: in files over 200 lines difflib otherwise ignores frequent lines
        # (blank lines, closing brackets) as anchors, which misplaces changes near them.
        def __init__(
            self,
            isjunk: object = None,
            a: Sequence[str] = "",
            b: Sequence[str] = "",
            autojunk: bool = True,
        ) -> None:
            super().__init__(None, a, b, autojunk=False)

    ours_label, base_label, theirs_label = labels
    base_lines, theirs_lines, ours_lines = split_lines(base), split_lines(theirs), split_lines(ours)
    newline = newline_of(ours_lines, theirs_lines, base_lines)
    merger = Merge3(base_lines, ours_lines, theirs_lines, sequence_matcher=Matcher)  # type: ignore[arg-type]
    out: list[str] = []
    conflicts = 0
    for group in merger.merge_groups():
        if group[0] != "conflict":
            out.extend(group[1])
            continue
        _, base_part, ours_part, theirs_part = group
        mine, other = list(ours_part), list(theirs_part)
        tail: list[str] = []
        if not show_base:
            head = _common_run(mine, other)
            out.extend(mine[:head])
            mine, other = mine[head:], other[head:]
            back = _common_run(mine[::-1], other[::-1], allow_unterminated=True)
            if back:
                tail = mine[len(mine) - back :]
                mine, other = mine[: len(mine) - back], other[: len(other) - back]
        conflicts += 1
        out.append(marker_line(MARK_START, ours_label, newline))
        out.extend(terminated(mine, newline))
        if show_base:
            out.append(marker_line(MARK_BASE, base_label, newline))
            out.extend(terminated(base_part, newline))
        out.append(MARK_MID + newline)
        out.extend(terminated(other, newline))
        out.append(marker_line(MARK_END, theirs_label, newline))
        out.extend(tail)
    return MergeResult("".join(out), conflicts)


def _common_run(a: Sequence[str], b: Sequence[str], allow_unterminated: bool = False) -> int:
    """How many leading lines ``a`` and ``b`` share (stopping at a line without a newline,
    which cannot precede a marker, unless ``allow_unterminated``)."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y or (not allow_unterminated and not x.endswith("\n")):
            break
        count += 1
    return count
