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

import re
from pathlib import Path

from ..errors import NoSpeculation, ServerUnreachable
from .window import Window

LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+|nan), "
    r"Accepted throughput: [\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pos>[\d., ]*?), Avg Draft acceptance rate"
)


def read_log(path: Path) -> Window:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ServerUnreachable(f"cannot read the log file {path}: {exc}") from None
    drafts = draft_tokens = accepted = 0.0
    per_pos: list[float] = []
    lines = 0
    for match in LINE.finditer(text):
        try:
            rates = [float(r) for r in match["pos"].split(",") if r.strip()]
            acc, drafted = float(match["acc"]), float(match["drafted"])
            mal = float(match["mal"]) if match["mal"] != "nan" else 1.0
        except ValueError:
            rates, acc, drafted, mal = [-1.0], 0.0, 0.0, 0.0
        k = len(rates)
        if not k or any(not 0 <= r <= 1 for r in rates) or acc > drafted or mal < 1:
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
