"""Text operations behind ``import --diff`` and ``port``: split a diff, apply it fuzzily, merge.

Pure functions, no file I/O: callers read the files and write what comes back. unidiff (parsing)
and merge3 (three-way merge, from the breezy project) are imported inside the functions that use
them, so importing this module costs the commands that never merge nothing.

Lines are split on ``\\n`` only and keep their endings: a ``\\r\\n`` stays on its line, a form
feed is not a line break, and a last line without a newline stays without one. Wherever nothing
changed, every function gives back exactly the text it was given.

Conflict blocks use git's markers (``<<<<<<< ``, ``||||||| ``, ``=======``, ``>>>>>>> ``), each
on a line of its own: a conflict side whose last line has no newline gets one, as ``git
merge-file`` does, so the markers never glue onto text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..errors import DiffShapeError

if TYPE_CHECKING:
    from unidiff.patch import Hunk, PatchedFile, PatchSet

MARK_START = "<<<<<<<"
MARK_BASE = "|||||||"
MARK_MID = "======="
MARK_END = ">>>>>>>"

HunkStatus = Literal["applied", "already-applied", "rejected"]


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HunkOutcome:
    """What became of one hunk of a file's diff.

    ``line`` is 1-based in the source: where the hunk's first line sits when applied, where its
    target side was found when already applied, where its conflict block starts when rejected.
    ``offset`` is ``line`` minus the line the hunk header states; ``fuzz`` is the number of context
    lines ignored at each end (GNU patch's fuzz factor; 0 unless applied with fuzz).
    """

    number: int  # 1-based, the way GNU patch counts hunks
    status: HunkStatus
    line: int
    offset: int
    fuzz: int

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"


@dataclass(frozen=True)
class FuzzResult:
    """``apply_fuzzy``'s answer; ``conflict_text == text`` when no hunk was rejected."""

    text: str  # the source with every hunk that could be placed applied
    hunks: list[HunkOutcome]
    rejects: str  # the rejected hunks as a ``.rej`` unified diff (with file header), or ""
    conflict_text: str  # ``text`` with each rejected hunk as a conflict block

    @property
    def rejected(self) -> list[HunkOutcome]:
        return [h for h in self.hunks if h.rejected]


@dataclass(frozen=True)
class MergeResult:
    text: str
    conflicts: int  # number of conflict blocks in ``text`` (0: a clean merge)


# --- lines ---------------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping each line's ending (``"".join`` gives ``text`` back)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _newline_of(*texts: Sequence[str]) -> str:
    """The line ending markers get: the first file's first line's (``\\r\\n`` or ``\\n``)."""
    for lines in texts:
        if lines and lines[0].endswith("\n"):
            return "\r\n" if lines[0].endswith("\r\n") else "\n"
    return "\n"


def _terminated(lines: Sequence[str], newline: str) -> list[str]:
    """``lines`` with a newline added to the last one if it has none (it precedes a marker)."""
    out = list(lines)
    if out and not out[-1].endswith("\n"):
        out[-1] += newline
    return out


def _marker(mark: str, label: str, newline: str) -> str:
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


# --- parsing -------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def _parse(diff_text: str, what: str) -> PatchSet:
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    if diff_text and not diff_text.endswith("\n"):
        diff_text += "\n"  # a diff cut at its last newline (pasted, trimmed) still means the same
    try:
        patch_set = PatchSet(diff_text)
    except (UnidiffParseError, ValueError) as exc:
        raise DiffShapeError(f"{what} does not parse as a unified diff: {_one_line(exc)}") from None
    if not patch_set:
        raise DiffShapeError(
            f"{what} holds no file diff (no `diff --git` or `---`/`+++` header followed by hunks)"
        )
    return patch_set


def _rel(name: str | None) -> str | None:
    """A diff's file name as a path relative to site-packages; None for /dev/null."""
    from unidiff.constants import DEV_NULL, RE_PATCH_FILE_PREFIX

    if not name or name == DEV_NULL:
        return None
    if len(name) >= 2 and name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name[2:] if RE_PATCH_FILE_PREFIX.match(name) else name


def _in_vllm(rel: str) -> bool:
    return rel.split("/", 1)[0] == "vllm"


def _shape_problem(patched: PatchedFile, source: str | None, target: str | None) -> str | None:
    """What this file's diff does beyond editing an existing text file (a phrase), or None."""
    name = target or source
    if patched.is_binary_file:
        return f"changes the binary file {name}"
    if source is None:
        return f"creates {target}"
    if target is None:
        return f"deletes {source}"
    if source != target:
        return f"renames or copies {source} to {target}"
    if patched.source_mode != patched.target_mode:
        return f"changes the mode ({patched.source_mode} -> {patched.target_mode}) of {name}"
    if patched.is_symlink or patched.is_submodule:
        return f"changes the link or submodule {name}"
    if not len(patched):
        return f"has no text change for {name}"
    return None


def _hunk_text(hunk: Hunk) -> str:
    head = (
        f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    )
    if hunk.section_header:
        head += " " + hunk.section_header
    body = "".join(str(line) for line in hunk if line.line_type in ("+", "-", " ", "\\"))
    return head + "\n" + body


def _file_text(source_name: str, target_name: str, hunks: Sequence[Hunk]) -> str:
    return f"--- {source_name}\n+++ {target_name}\n" + "".join(_hunk_text(h) for h in hunks)


def split_upstream_diff(diff_text: str) -> tuple[dict[str, str], list[str]]:
    """Split a multi-file diff (``git diff``, a GitHub PR's ``.diff``) into one diff per file.

    Returns ``({path: file diff}, dropped)``: paths under ``vllm/`` relative to site-packages
    (each diff has plain ``--- a/path`` / ``+++ b/path`` headers and the original hunks), and the
    paths outside ``vllm/`` (tests, docs, CI...), in diff order, which a patch cannot touch.

    Raises ``DiffShapeError`` when the diff does not parse, holds no file, or creates, deletes,
    renames, copies, changes the mode of or makes a binary change to a file under ``vllm/``.
    """
    from ..fileops import is_package_path

    kept: dict[str, str] = {}
    dropped: list[str] = []
    for patched in _parse(diff_text, "the diff"):
        source, target = _rel(patched.source_file), _rel(patched.target_file)
        names = [name for name in (source, target) if name is not None]
        inside = [name for name in names if _in_vllm(name)]
        if not inside:
            shown = target or source or patched.path
            if shown not in dropped:
                dropped.append(shown)
            continue
        rel = inside[-1]
        problem = _shape_problem(patched, source, target)
        if problem:
            raise DiffShapeError(
                f"the diff {problem}; a patch may only edit existing text files under vllm/"
            )
        if not is_package_path(rel):
            raise DiffShapeError(
                f"the diff names {rel!r}, which is not a path inside vllm/ written plainly "
                "(vllm/dir/file.py: no '.', '..' or empty names, no backslashes)"
            )
        if rel in kept:
            raise DiffShapeError(f"the diff changes {rel} in two places; give each file once")
        kept[rel] = _file_text(f"a/{rel}", f"b/{rel}", patched)
    return kept, dropped


# --- fuzzy apply ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hunk:
    number: int
    start: int  # 0-based index in the source where the hunk's source side begins, as stated
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text with its own line ending)

    @property
    def old(self) -> list[str]:
        return [text for kind, text in self.lines if kind != "+"]

    @property
    def new(self) -> list[str]:
        return [text for kind, text in self.lines if kind != "-"]

    def context_run(self, lines: Sequence[tuple[str, str]]) -> int:
        count = 0
        for kind, _ in lines:
            if kind != " ":
                break
            count += 1
        return count

    @property
    def lead(self) -> int:
        return self.context_run(self.lines)

    @property
    def trail(self) -> int:
        return self.context_run(self.lines[::-1])

    def trimmed(self, head: int, tail: int) -> _Hunk:
        return _Hunk(self.number, self.start + head, self.lines[head : len(self.lines) - tail])


def _hunks_of(hunks: Sequence[Hunk]) -> list[_Hunk]:
    out = []
    for number, hunk in enumerate(hunks, 1):
        lines: list[tuple[str, str]] = []
        for line in hunk:
            if line.line_type == "\\":  # "\ No newline at end of file": the line before has none
                if lines and lines[-1][1].endswith("\n"):
                    kind, text = lines[-1]
                    lines[-1] = (kind, text[:-1])
            elif line.line_type in ("+", "-", " "):
                lines.append((line.line_type, line.value))
        start = hunk.source_start - 1 if hunk.source_length else hunk.source_start
        out.append(_Hunk(number, max(start, 0), tuple(lines)))
    return out


def _matches_at(src: Sequence[str], pos: int, pattern: Sequence[str]) -> bool:
    if pos < 0 or pos + len(pattern) > len(src):
        return False
    return all(src[pos + i] == line for i, line in enumerate(pattern))


def _nearest(src: Sequence[str], pattern: Sequence[str], guess: int, lo: int) -> int | None:
    """The start nearest ``guess`` (later before earlier) where ``pattern`` matches, from ``lo``."""
    hi = len(src) - len(pattern)
    if hi < lo:
        return None
    guess = min(max(guess, lo), hi)
    for delta in range(max(guess - lo, hi - guess) + 1):
        for pos in (guess + delta, guess - delta) if delta else (guess,):
            if lo <= pos <= hi and _matches_at(src, pos, pattern):
                return pos
    return None


def _locate(
    src: Sequence[str], hunk: _Hunk, fuzz: int, last_offset: int, lo: int
) -> tuple[int, _Hunk] | None:
    """Where the hunk's source side matches with ``fuzz``, GNU patch's way (``locate_hunk``).

    A hunk with less leading than trailing context was cut by the start of the file (and the
    other way round by its end), so it may only match there until fuzz has used up the surplus.
    Returns the match and the hunk as trimmed of its ignored context lines.
    """
    lead, trail = hunk.lead, hunk.trail
    context = max(lead, trail)
    head, tail = fuzz + lead - context, fuzz + trail - context
    at_start = head < 0 and hunk.start == 0
    at_end = tail < 0
    head, tail = min(max(head, 0), lead), min(max(tail, 0), trail)
    part = hunk.trimmed(head, tail)
    pattern = part.old
    if not pattern and hunk.old:
        return None  # fuzz never trims a hunk down to nothing it could be checked against
    if at_start or at_end:
        anchor = 0 if at_start else len(src) - len(pattern)
        if at_start and at_end and len(pattern) != len(src):
            return None
        ok = anchor >= lo and _matches_at(src, anchor, pattern)
        return (anchor, part) if ok else None
    pos = _nearest(src, pattern, part.start + last_offset, lo)
    return None if pos is None else (pos, part)


def _significant(line: str) -> bool:
    return any(ch.isalnum() for ch in line)


def _aligned_score(src: Sequence[str], pos: int, pattern: Sequence[str]) -> int:
    """How many of ``pattern``'s lines with letters or digits equal ``src``'s from ``pos`` on."""
    return sum(1 for i, line in enumerate(pattern) if src[pos + i] == line and _significant(line))


def _best_window(src: Sequence[str], hunk: _Hunk, guess: int, lo: int, hi: int) -> tuple[int, int]:
    """(start, length) of the lines of ``src[lo:hi]`` a rejected hunk's conflict block replaces.

    Only lines with letters or digits count as evidence. First choice: the place where both the
    hunk's leading and trailing context are found, in order and at most a few dozen lines apart
    (the lines between may have changed in any way); then where the whole source side lines up
    best line by line; else nothing, at ``guess`` (clamped). Ties go to the place nearest
    ``guess``.
    """
    old = hunk.old
    where = min(max(guess, lo), hi)
    lead, trail = old[: hunk.lead], old[len(old) - hunk.trail :]
    if any(map(_significant, lead)) and any(map(_significant, trail)):
        ends = [_aligned_score(src, q, trail) for q in range(lo, hi - len(trail) + 1)]
        stretch = len(old) + max(20, 2 * len(old))
        best_pair: tuple[int, int, int] | None = None  # (score, -distance, -span)
        for p in range(lo, hi - len(lead) + 1):
            lead_score = _aligned_score(src, p, lead)
            if not lead_score:
                continue
            for q in range(p + len(lead), min(p + stretch - len(trail), hi - len(trail)) + 1):
                trail_score = ends[q - lo]
                if trail_score:
                    span = q + len(trail) - p
                    key = (lead_score + trail_score, -abs(p - guess), -span)
                    if best_pair is None or key > best_pair:
                        best_pair, where = key, p
        if best_pair is not None:
            return where, -best_pair[2]
    length = min(len(old), hi - lo)
    best: tuple[int, int] | None = None  # (score, -distance)
    for pos in range(lo, hi - length + 1):
        score = _aligned_score(src, pos, old[:length])
        if score and (best is None or (score, -abs(pos - guess)) > best):
            best, where = (score, -abs(pos - guess)), pos
    return (where, length) if best else (where, 0)


def apply_fuzzy(
    source: str,
    file_diff: str,
    *,
    max_fuzz: int = 2,
    ours_label: str = "installed",
    theirs_label: str = "upstream diff",
) -> FuzzResult:
    """Apply one file's diff to ``source`` the way GNU patch does, hunk by hunk, in order.

    Each hunk is tried at its stated line (shifted by the previous hunk's offset, as GNU patch
    does), then at the nearest line of the whole file where its context and removed lines match
    exactly (later before earlier). A hunk whose target side is already there exactly is
    ``already-applied`` and left alone. Then fuzz 1..``max_fuzz`` ignores that many leading and
    trailing context lines. Hunks never overlap or go back before an earlier hunk's lines; a
    hunk that fits nowhere is rejected: it goes to ``rejects`` and, in ``conflict_text``, becomes
    a block ``<<<<<<< {ours_label}`` (the file's lines where its source side lines up best, or
    none) ``=======`` (its target side) ``>>>>>>> {theirs_label} hunk N``.

    Raises ``DiffShapeError`` when ``file_diff`` does not parse or is not exactly one file's diff.
    """
    if max_fuzz < 0:
        raise ValueError("max_fuzz must be >= 0")
    patch_set = _parse(file_diff, "the file's diff")
    if len(patch_set) != 1:
        raise DiffShapeError(f"expected one file's diff, got {len(patch_set)} files")
    (patched,) = patch_set
    if patched.is_binary_file:
        raise DiffShapeError(f"{patched.path}: a binary change cannot be applied to text")
    src = split_lines(source)
    hunks = _hunks_of(patched)

    # Pass 1: place what fits. blocks: hunk number -> (pos, consumed lines, replacement or None).
    placed: dict[int, tuple[int, int, list[str] | None]] = {}
    outcomes: dict[int, HunkOutcome] = {}
    guesses: dict[int, int] = {}
    last_offset = 0
    lo = 0
    for hunk in hunks:
        guesses[hunk.number] = hunk.start + last_offset
        found = _locate(src, hunk, 0, last_offset, lo)
        status: HunkStatus = "applied"
        fuzz = 0
        if found is None and hunk.new:
            there = _nearest(src, hunk.new, hunk.start + last_offset, lo)
            if there is not None:
                found, status = (there, hunk), "already-applied"
        for level in range(1, max_fuzz + 1):
            if found is not None:
                break
            found, fuzz = _locate(src, hunk, level, last_offset, lo), level
        if found is None:
            continue
        pos, part = found
        head = part.start - hunk.start
        offset = pos - part.start
        if status == "applied":
            placed[hunk.number] = (pos, len(part.old), part.new)
            lo = pos + len(part.old)
        else:
            placed[hunk.number] = (pos, len(hunk.new), None)
            lo = pos + len(hunk.new)
            fuzz = 0
        last_offset = offset
        outcomes[hunk.number] = HunkOutcome(hunk.number, status, pos - head + 1, offset, fuzz)

    text = _assemble(src, [block for _, block in sorted(placed.items())])
    rejected = [h for h in hunks if h.number not in placed]
    if not rejected:
        return FuzzResult(text, [outcomes[h.number] for h in hunks], "", text)

    # Pass 2: put each rejected hunk where it lines up best between its placed neighbours.
    newline = _newline_of(src)
    blocks = dict(placed)
    lo = 0
    for hunk in hunks:
        if hunk.number in placed:
            pos, consumed, _ = placed[hunk.number]
            lo = pos + consumed
            continue
        later = [placed[n][0] for n in placed if n > hunk.number]
        hi = min(later, default=len(src))
        pos, length = _best_window(src, hunk, guesses[hunk.number], lo, hi)
        block = [
            _marker(MARK_START, ours_label, newline),
            *_terminated(src[pos : pos + length], newline),
            MARK_MID + newline,
            *_terminated(hunk.new, newline),
            _marker(MARK_END, f"{theirs_label} hunk {hunk.number}", newline),
        ]
        blocks[hunk.number] = (pos, length, block)
        lo = pos + length
        outcomes[hunk.number] = HunkOutcome(hunk.number, "rejected", pos + 1, pos - hunk.start, 0)
    originals = list(patched)
    rejects = _file_text(
        patched.source_file, patched.target_file, [originals[h.number - 1] for h in rejected]
    )
    conflict_text = _assemble(src, [block for _, block in sorted(blocks.items())])
    return FuzzResult(text, [outcomes[h.number] for h in hunks], rejects, conflict_text)


def _assemble(src: Sequence[str], blocks: Sequence[tuple[int, int, list[str] | None]]) -> str:
    """``src`` with each (pos, consumed, replacement) block swapped in; None keeps the lines."""
    out: list[str] = []
    cursor = 0
    for pos, consumed, replacement in blocks:
        out.extend(src[cursor:pos])
        out.extend(src[pos : pos + consumed] if replacement is None else replacement)
        cursor = pos + consumed
    out.extend(src[cursor:])
    return "".join(out)


# --- three-way merge -----------------------------------------------------------------------------


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
    newline = _newline_of(ours_lines, theirs_lines, base_lines)
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
        out.append(_marker(MARK_START, ours_label, newline))
        out.extend(_terminated(mine, newline))
        if show_base:
            out.append(_marker(MARK_BASE, base_label, newline))
            out.extend(_terminated(base_part, newline))
        out.append(MARK_MID + newline)
        out.extend(_terminated(other, newline))
        out.append(_marker(MARK_END, theirs_label, newline))
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
