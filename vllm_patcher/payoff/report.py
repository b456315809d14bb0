"""payoff's text report: what was measured, what it means, what to change."""

from __future__ import annotations

from .analysis import UNKNOWN, Analysis


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def lines(a: Analysis) -> list[str]:
    w = a.window
    if w.since_start:
        span = "since the server started" + (f" ({w.seconds:.0f} s)" if w.seconds else "")
        if w.reset:
            span += ": the counters went down between the readings (a restart), so only the last is used"
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
            f"  mean acceptance length {a.mean_acceptance_length:.2f} tokens per step "
            "(1 + accepted / drafts)"
        )
    curve = "   ".join(
        f"{i + 1}: {_pct(p)} ({_pct(c)})"
        for i, (p, c) in enumerate(zip(a.prefix, a.conditional, strict=True))
    )
    out.append(f"  accepted by position (given the one before): {curve}")
    if a.step_s is not None and a.tokens_per_step is not None and a.per_token_s is not None:
        batch = f", {w.running:.1f} requests running when read" if w.running is not None else ""
        out.append(
            f"  decode: {a.tokens_per_step:.2f} tokens per step, {a.step_s * 1000:.2f} ms per "
            f"step, {a.per_token_s * 1000:.2f} ms per token{batch}"
        )
    if a.baseline is not None and a.baseline_per_token_s is not None:
        out.append(
            f"  baseline {a.baseline.source}: {a.baseline_per_token_s * 1000:.2f} ms per token"
            + (f" -> measured speedup {a.speedup:.2f}x" if a.speedup is not None else "")
        )
    if a.draft_cost_s is not None and a.step_s is not None:
        out.append(
            f"  step cost: {(a.step_s - a.k * a.draft_cost_s) * 1000:.2f} ms plain + "
            f"{a.draft_cost_s * 1000:.2f} ms per draft token (fitted from the two servers)"
        )
    if a.expected_speedup:
        exp = "   ".join(f"k={k}: {v:.2f}x" for k, v in a.expected_speedup.items())
        out.append(f"  expected speedup: {exp}   best k = {a.best_k}")
    if a.break_even_length is not None:
        out.append(
            f"  breaks even at a mean acceptance length of {a.break_even_length:.2f} with k = {a.k}"
        )
    out.extend(f"  -> {line}" for line in a.advice)
    if a.verdict == UNKNOWN and a.speedup is not None:
        out.append("verdict: unknown (the two servers were not under the same load)")
    elif a.verdict == UNKNOWN:
        out.append("verdict: unknown (no baseline: the speedup was not measured)")
    else:
        out.append(f"verdict: {a.verdict} ({a.speedup:.2f}x measured)")
    return out
