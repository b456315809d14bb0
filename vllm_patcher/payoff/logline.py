"""vLLM's periodic ``SpecDecoding metrics: ...`` log lines, when no /metrics scrape is at hand.

The format string is the same in every release from 0.11.0: mean acceptance length, accepted and
drafted throughput, accepted and drafted tokens, per-position acceptance rates, the average
draft acceptance rate. Each line covers the drafts since the previous printed line, so the lines
add up. The number of drafts is not printed: it is rebuilt as accepted / (mean length - 1) (kept
between drafted / k and drafted, as a draft holds 1 to k tokens), or drafted / k when nothing
was accepted, and the per-position counts from the rounded rates, so a window read from a log is
approximate (the report says so).
"""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import NoSpeculation, ServerUnreachable
from .window import Window

# the numbers as vLLM prints them, and what it never prints (a sign, inf), so that such a line
# is refused as one vLLM would not print rather than passed over
NUMBER = r"-?(?:[\d.]+|nan|inf)"
LINE = re.compile(
    rf"SpecDecoding metrics: Mean acceptance length: (?P<mal>{NUMBER}), "
    rf"Accepted throughput: {NUMBER} tokens/s, Drafted throughput: {NUMBER} tokens/s, "
    rf"Accepted: (?P<acc>{NUMBER}) tokens, Drafted: (?P<drafted>{NUMBER}) tokens, "
    r"Per-position acceptance rate: (?P<pos>[-\w., ]*?), Avg Draft acceptance rate"
)
LINE_CHARS = 1 << 16  # a log is read a line at a time, at most this many characters at once


def _lines(path: Path) -> Iterator[str]:
    """The log's lines (a longer one in pieces): only a regular file, never all of it at once."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ServerUnreachable(f"{path} is not a log file (not a regular file)")
        with path.open(encoding="utf-8", errors="replace") as f:
            yield from iter(lambda: f.readline(LINE_CHARS), "")
    except OSError as exc:
        raise ServerUnreachable(f"cannot read the log file {path}: {exc}") from None


def read_log(path: Path) -> Window:
    drafts = draft_tokens = accepted = 0.0
    per_pos: list[float] = []
    lines = 0
    for match in (m for line in _lines(path) if (m := LINE.search(line)) is not None):
        try:
            rates = [float(r) for r in match["pos"].split(",") if r.strip()]
            acc, drafted = float(match["acc"]), float(match["drafted"])
            mal = float(match["mal"]) if match["mal"] != "nan" else 1.0
        except ValueError:
            rates, acc, drafted, mal = [-1.0], 0.0, 0.0, 0.0
        k = len(rates)
        numbers = (acc, drafted, mal)
        if (
            not k
            or any(not 0 <= r <= 1 for r in rates)
            or not all(math.isfinite(x) and x >= 0 for x in numbers)
            or acc > drafted
            or mal < 1
        ):
            raise ServerUnreachable(
                f"{path}: a SpecDecoding line vLLM would not print ({match.group(0)[:120]}...)"
            )
        # the line prints the mean acceptance length (1 + accepted / drafts), so the drafts are
        # accepted / (length - 1); a draft holds 1 to k tokens, which bounds the count when the
        # rounded length says little (n-gram drafts are often shorter than k)
        n = acc / (mal - 1) if acc > 0 and mal > 1 else drafted / k
        n = min(max(n, drafted / k), drafted)
        drafts += n
        draft_tokens += drafted
        accepted += acc
        if len(per_pos) < k:
            per_pos.extend([0.0] * (k - len(per_pos)))
        for i, rate in enumerate(rates):
            per_pos[i] += rate * n
        lines += 1
    if not lines:
        raise NoSpeculation(
            f"{path} has no 'SpecDecoding metrics:' line (vLLM prints one every "
            "VLLM_LOG_STATS_INTERVAL seconds while a speculative server is busy, not with "
            "--disable-log-stats or several API servers); give a server URL or a saved /metrics"
        )
    return Window(
        source=f"{path} ({lines} log line{'s' * (lines != 1)})",
        seconds=None,
        since_start=True,
        reset=False,
        k=len(per_pos),
        drafts=round(drafts),
        draft_tokens=draft_tokens,
        accepted=accepted,
        per_pos=tuple(round(p) for p in per_pos),
        approximate=True,
    )
