"""Diff text shared by the fuzzy applier and the three-way merge: lines split on ``\\n`` only,
git's conflict markers, and unified diffs parsed (unidiff, imported on first use) and written back.

Lines keep their endings: a ``\\r\\n`` stays on its line, a form feed is not a line break, and a
last line without a newline stays without one. Conflict blocks use git's markers (``<<<<<<< ``,
``||||||| ``, ``=======``, ``>>>>>>> ``), each on a line of its own: a conflict side whose last line
has no newline gets one, as ``git merge-file`` does, so the markers never glue onto text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import DiffShapeError

if TYPE_CHECKING:
    from unidiff.patch import Hunk, PatchSet

MARK_START = "<<<<<<<"
MARK_BASE = "|||||||"
MARK_MID = "======="
MARK_END = ">>>>>>>"


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping each line's ending (``"".join`` gives ``text`` back)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def newline_of(*texts: Sequence[str]) -> str:
    """The line ending markers get: the first file's first line's (``\\r\\n`` or ``\\n``)."""
    for lines in texts:
        if lines and lines[0].endswith("\n"):
            return "\r\n" if lines[0].endswith("\r\n") else "\n"
    return "\n"


def terminated(lines: Sequence[str], newline: str) -> list[str]:
    """``lines`` with a newline added to the last one if it has none (it precedes a marker)."""
    out = list(lines)
    if out and not out[-1].endswith("\n"):
        out[-1] += newline
    return out


def marker_line(mark: str, label: str, newline: str) -> str:
    return (f"{mark} {label}" if label else mark) + newline


def conflict_marker_lines(text: str) -> list[int]:
    """1-based numbers of the lines that are conflict markers (``--continue`` refuses while any).

    A marker is a line that starts with ``<<<<<<< ``, ``||||||| `` or ``>>>>>>> `` (or is one of
    them without a label), or is exactly ``=======``; line endings are ignored.
    """
    found = []
    for number, line in enumerate(split_lines(text), 1):
        body = line.rstrip("\r\n")
        if body == MARK_MID or any(
            body == mark or body.startswith(mark + " ")
            for mark in (MARK_START, MARK_BASE, MARK_END)
        ):
            found.append(number)
    return found


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def parse_diff(diff_text: str, what: str) -> PatchSet:
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    if diff_text and not diff_text.endswith("\n"):
        diff_text += "\n"  # a diff cut at its last newline (pasted, trimmed) still means the same
    try:
        patch_set = PatchSet(diff_text)
    except (UnidiffParseError, ValueError) as exc:
        raise DiffShapeError(f"{what} does not parse as a unified diff: {one_line(exc)}") from None
    if not patch_set:
        raise DiffShapeError(
            f"{what} holds no file diff (no `diff --git` or `---`/`+++` header followed by hunks)"
        )
    return patch_set


def _hunk_text(hunk: Hunk) -> str:
    head = (
        f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    )
    if hunk.section_header:
        head += " " + hunk.section_header
    body = "".join(str(line) for line in hunk if line.line_type in ("+", "-", " ", "\\"))
    return head + "\n" + body


def file_text(source_name: str, target_name: str, hunks: Sequence[Hunk]) -> str:
    return f"--- {source_name}\n+++ {target_name}\n" + "".join(_hunk_text(h) for h in hunks)
