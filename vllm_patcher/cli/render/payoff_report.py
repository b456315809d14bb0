"""payoff's text report: what was measured, what it means, what to change."""

from __future__ import annotations

from ...payoff.analysis import UNKNOWN, Analysis


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def lines(a: Analysis) -> list[str]:
    w = a.window
    if w.since_start:
        span = "since the server started" + (f" ({w.seconds:.0f} s)" if w.seconds else "")
        if w.reset:
            span += ": the counters went down between the readings (a restart), so only the last is used"
    elif w.seconds is None:
        span = "over a time not known (the files have the same modification time: cp -p keeps it)"
    else:
        span = f"over {w.seconds:.1f} s"
    out = [
        f"payoff: {w.source} {span}"
        + (" (approximate: rebuilt from log lines)" if w.approximate else "")
    ]
    out.append(
        f"  k = {a.k}   drafts {int(w.drafts):,}   draft tokens {int(w.draft_tokens):,}   "
        f"accepted {int(w.accepted):,} ({_pct(a.acceptance_rate)})"
    )
    if a.mean_acceptance_length is not None:
        out.append(
            f"  mean acceptance length {a.mean_acceptance_length:.2f} tokens per drafting step "
            "(1 + accepted / drafts)"
        )
    curve = "   ".join(
        f"{i + 1}: {_pct(p)} ({_pct(c)})"
        for i, (p, c) in enumerate(zip(a.prefix, a.conditional, strict=True))
    )
    out.append(f"  accepted by position (given the one before): {curve}")
    if a.step_s is not None and a.tokens_per_step is not None and a.per_token_s is not None:
        rate = f", {a.tokens_per_s:,.1f} tokens/s" if a.tokens_per_s is not None else ""
        out.append(
            f"  decode: {a.tokens_per_step:.2f} tokens per step (measured), {a.step_s * 1000:.2f} "
            f"ms per step, {a.per_token_s * 1000:.2f} ms per token{rate}"
        )
    out.extend(_load(a))
    if a.baseline is not None and a.baseline_per_token_s is not None:
        rate = (
            f", {a.baseline_tokens_per_s:,.1f} tokens/s"
            if a.baseline_tokens_per_s is not None
            else ""
        )
        out.append(
            f"  baseline {a.baseline.source}: {a.baseline_per_token_s * 1000:.2f} ms per token{rate}"
        )
    if a.speedup is not None:
        thr = (
            f", throughput ratio {a.throughput_ratio:.2f}x"
            if a.throughput_ratio is not None
            else ", throughput not compared"
        )
        out.append(f"  measured: per-token time ratio {a.speedup:.2f}x{thr}")
    if a.shorter_k_range:
        ranges = "   ".join(
            f"k={k}: {lo:.2f}x to {hi:.2f}x" for k, (lo, hi) in a.shorter_k_range.items()
        )
        out.append(f"  shorter drafts, two cost models from this one k (not measured): {ranges}")
    if a.break_even_length is not None:
        out.append(
            f"  breaks even at {a.break_even_length:.2f} tokens per step with k = {a.k} "
            "(these step times)"
        )
    out.extend(f"  -> {line}" for line in a.advice if line != a.unknown_reason)
    if a.verdict == UNKNOWN and a.unknown_reason:
        out.append(f"verdict: unknown: {a.unknown_reason}")
    elif a.verdict == UNKNOWN:
        out.append("verdict: unknown (no baseline: the speedup was not measured)")
    else:
        both = f", {a.throughput_ratio:.2f}x throughput" if a.throughput_ratio is not None else ""
        out.append(f"verdict: {a.verdict} ({a.speedup:.2f}x per-token time{both}, measured)")
    return out


def _load(a: Analysis) -> list[str]:
    """Requests decoding on each side: what 'the same load' is checked on."""
    w, b = a.window, a.baseline
    here = f"{w.decoding:.1f} decoding on average" if w.decoding is not None else ""
    running = f"{w.running:.1f} running when read" if w.running is not None else ""
    line = ", ".join(x for x in (here, running) if x)
    if b is not None:
        there = ", ".join(
            x
            for x in (
                f"{b.decoding:.1f} decoding on average" if b.decoding is not None else "",
                f"{b.running:.1f} running when read" if b.running is not None else "",
            )
            if x
        )
        line = f"{line or '-'} here; baseline: {there or '-'}"
    return [f"  requests: {line}"] if line else []
