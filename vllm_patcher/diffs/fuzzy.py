"""Apply one file's diff fuzzily, the way GNU patch does (for ``import --diff``): each hunk at
its stated line, else the nearest exact match, else with fuzz; a hunk that fits nowhere becomes a
conflict block where it lines up best. Pure functions, no file I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..errors import DiffShapeError
from .text import (
    MARK_END,
    MARK_MID,
    MARK_START,
    file_text,
    marker_line,
    newline_of,
    parse_diff,
    split_lines,
    terminated,
)

if TYPE_CHECKING:
    from unidiff.patch import Hunk

HunkStatus = Literal["applied", "already-applied", "rejected"]


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
    patch_set = parse_diff(file_diff, "the file's diff")
    if len(patch_set) != 1:
        raise DiffShapeError(f"expected one file's diff, got {len(patch_set)} files")
    (patched,) = patch_set
    if patched.is_binary_file:
        raise DiffShapeError(f"{patched.path}: a binary change cannot be applied to text")
    src = split_lines(source)
    hunks = _hunks_of(patched)
    placed, outcomes, guesses = _place(src, hunks, max_fuzz)
    text = _assemble(src, [block for _, block in sorted(placed.items())])
    rejected = [h for h in hunks if h.number not in placed]
    if not rejected:
        return FuzzResult(text, [outcomes[h.number] for h in hunks], "", text)
    blocks = _with_conflicts(src, hunks, placed, outcomes, guesses, ours_label, theirs_label)
    originals = list(patched)
    rejects = file_text(
        patched.source_file, patched.target_file, [originals[h.number - 1] for h in rejected]
    )
    conflict_text = _assemble(src, [block for _, block in sorted(blocks.items())])
    return FuzzResult(text, [outcomes[h.number] for h in hunks], rejects, conflict_text)


# A placed hunk: (pos, consumed lines, replacement, or None to keep the lines) by hunk number.
_Blocks = dict[int, tuple[int, int, list[str] | None]]


def _place(
    src: Sequence[str], hunks: Sequence[_Hunk], max_fuzz: int
) -> tuple[_Blocks, dict[int, HunkOutcome], dict[int, int]]:
    """Pass 1: place what fits, in order; the outcomes, and where each hunk was first looked for."""
    placed: _Blocks = {}
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
    return placed, outcomes, guesses


def _with_conflicts(
    src: Sequence[str],
    hunks: Sequence[_Hunk],
    placed: _Blocks,
    outcomes: dict[int, HunkOutcome],
    guesses: dict[int, int],
    ours_label: str,
    theirs_label: str,
) -> _Blocks:
    """Pass 2: each rejected hunk as a conflict block where it lines up best between its placed
    neighbours (its outcome added to ``outcomes``)."""
    newline = newline_of(src)
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
            marker_line(MARK_START, ours_label, newline),
            *terminated(src[pos : pos + length], newline),
            MARK_MID + newline,
            *terminated(hunk.new, newline),
            marker_line(MARK_END, f"{theirs_label} hunk {hunk.number}", newline),
        ]
        blocks[hunk.number] = (pos, length, block)
        lo = pos + length
        outcomes[hunk.number] = HunkOutcome(hunk.number, "rejected", pos + 1, pos - hunk.start, 0)
    return blocks


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
