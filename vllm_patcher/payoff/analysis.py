"""From a window of a speculative server (and one of a plain server under the same load): the
acceptance figures, a per-step cost fitted from the two, the expected speedup of every shorter
draft, the best one, and a verdict.

The model, in one place:
- The count at position i is the number of drafts whose first i+1 tokens were all accepted, so
  ``prefix[i] = per_pos[i] / drafts`` and a draft of k' <= k tokens accepts, on average,
  ``prefix[0] + ... + prefix[k'-1]`` of them: a step emits ``L(k') = 1 + that sum`` tokens.
- A decode step's time is one sample of ``inter_token_latency_seconds`` (one per request and
  step); the per-token time is the steps' time over the tokens they emitted. On the plain server
  a step emits one token, so its step time ``t0`` is its per-token time.
- A speculative step with k drafts costs ``T(k) = t0 + k * c``: fitted from the two servers as
  ``c = (T(k) - t0) / k``. Then ``speedup(k') = t0 * L(k') / T(k')``, and speculation breaks even
  at a mean acceptance length of ``T(k) / t0``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .window import Window

PAYS, BREAK_EVEN, LOSES, UNKNOWN = "pays", "break-even", "loses", "unknown"
MARGIN = 0.05  # within +-5% of 1.0x is break-even
SMALL_SAMPLE = 500  # drafts; a tryout's 5 s windows of 50-150 drafts swung from 0.36x to 3.67x


@dataclass
class Analysis:
    window: Window
    baseline: Window | None
    k: int
    drafts: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    prefix: list[float]
    conditional: list[float | None]
    tokens_per_step: float | None
    step_s: float | None
    per_token_s: float | None
    baseline_per_token_s: float | None = None
    speedup: float | None = None
    draft_cost_s: float | None = None  # c: what one more draft token adds to a step
    expected_speedup: dict[int, float] = field(default_factory=dict)
    best_k: int | None = None
    break_even_length: float | None = None
    verdict: str = UNKNOWN
    advice: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        w = self.window
        return {
            "verdict": self.verdict,
            "speedup": _round(self.speedup),
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "per_position": [_round(p) for p in self.prefix],
            "conditional": [_round(p) for p in self.conditional],
            "k": self.k,
            "best_k": self.best_k,
            "expected_speedup": {str(k): _round(v) for k, v in self.expected_speedup.items()},
            "break_even_length": _round(self.break_even_length),
            "drafts": int(self.drafts),
            "draft_tokens": int(w.draft_tokens),
            "accepted_tokens": int(w.accepted),
            "window_s": _round(w.seconds),
            "since_start": w.since_start,
            "reset": w.reset,
            "approximate": w.approximate,
            "tokens_per_step": _round(self.tokens_per_step),
            "step_ms": _ms(self.step_s),
            "per_token_ms": _ms(self.per_token_s),
            "baseline_per_token_ms": _ms(self.baseline_per_token_s),
            "draft_cost_ms": _ms(self.draft_cost_s),
            "mean_batch": _round(w.running),
            "source": w.source,
            "baseline": self.baseline.source if self.baseline else None,
            "advice": self.advice,
        }


def _round(value: float | None, places: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, places)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else round(seconds * 1000, 3)


def wider(w: Window) -> str:
    """How to get a longer window from this source: --window is for a live server only."""
    if w.source.startswith(("http://", "https://")):
        return "widen --window"
    if w.approximate:
        return "give a log that covers more traffic"
    if w.since_start:  # one saved scrape: its window is since the server started
        return "save a scrape after more traffic"
    return "save the two scrapes further apart"


def _per_token(w: Window) -> tuple[float | None, float | None, float | None]:
    """Tokens per step, step time, per-token time of a window's decode steps."""
    if w.steps <= 0 or w.emitted <= 0:
        return None, None, None
    return w.emitted / w.steps, w.step_seconds / w.steps, w.step_seconds / w.emitted


def analyse(w: Window, baseline: Window | None = None) -> Analysis:
    """Figures for a window with drafts (the caller refuses one without)."""
    notes = []
    if sum(w.per_pos) > w.accepted and w.approximate:  # rounding of the log's figures
        w = dataclasses.replace(w, accepted=float(sum(w.per_pos)))
    elif sum(w.per_pos) > w.accepted:
        # vLLM 0.11-0.14 count -1 accepted for a step with no sampled token; the per-position
        # counts (a prefix count each) hold the true number of accepted tokens
        notes.append(
            f"the accepted-tokens counter ({int(w.accepted)}) is below the per-position counts' "
            f"sum ({int(sum(w.per_pos))}): vLLM 0.11-0.14 count -1 for a step that sampled "
            "nothing; the per-position counts are used"
        )
        w = dataclasses.replace(w, accepted=float(sum(w.per_pos)))
    k = w.k
    prefix = [p / w.drafts for p in w.per_pos] if w.drafts else [0.0] * k
    conditional: list[float | None] = []
    for i, p in enumerate(w.per_pos):
        before = w.drafts if i == 0 else w.per_pos[i - 1]
        conditional.append(p / before if before > 0 else None)
    tps, step_s, per_token_s = _per_token(w)
    a = Analysis(
        window=w,
        baseline=baseline,
        k=k,
        drafts=w.drafts,
        acceptance_rate=w.accepted / w.draft_tokens if w.draft_tokens else None,
        mean_acceptance_length=1 + w.accepted / w.drafts if w.drafts else None,
        prefix=prefix,
        conditional=conditional,
        tokens_per_step=tps,
        step_s=step_s,
        per_token_s=per_token_s,
    )
    if w.drafts < SMALL_SAMPLE:
        notes.append(
            f"only {int(w.drafts)} drafts in the window: the figures are noisy at this size; "
            f"{wider(w)} (or send more traffic) for {SMALL_SAMPLE} or more"
        )
    a.advice.extend(notes)
    if baseline is not None:
        _with_baseline(a, baseline)
    _advise(a)
    return a


def _with_baseline(a: Analysis, baseline: Window) -> None:
    _, t0, base_per_token = _per_token(baseline)
    a.baseline_per_token_s = base_per_token
    if base_per_token is None or a.per_token_s is None or t0 is None or a.step_s is None:
        return
    a.speedup = base_per_token / a.per_token_s
    a.verdict = verdict(a.speedup)
    if a.k and a.step_s <= t0:
        a.verdict = UNKNOWN  # a speedup from servers under different loads is no measurement
        a.advice.append(
            f"a speculative step ({a.step_s * 1000:.2f} ms) took no longer than a plain one "
            f"({t0 * 1000:.2f} ms), so the two servers were not under the same load (or the "
            "window is too short): no step cost can be fitted, and no shorter draft predicted; "
            f"put the same load on both at the same time and {wider(a.window)}"
        )
    elif a.k:
        a.draft_cost_s = (a.step_s - t0) / a.k
        for kk in range(1, a.k + 1):
            length = 1 + sum(a.prefix[:kk])
            a.expected_speedup[kk] = t0 * length / (t0 + kk * a.draft_cost_s)
        a.best_k = max(a.expected_speedup, key=lambda kk: a.expected_speedup[kk])
        a.break_even_length = a.step_s / t0


def verdict(speedup: float) -> str:
    if speedup >= 1 + MARGIN:
        return PAYS
    if speedup <= 1 - MARGIN:
        return LOSES
    return BREAK_EVEN


def _advise(a: Analysis) -> None:
    """What to change, in plain words, from what was measured (never a guessed speedup)."""
    say = a.advice.append
    if a.baseline is None:
        if a.mean_acceptance_length is not None:
            cost = f" (one speculative step took {a.step_s * 1000:.1f} ms here)" if a.step_s else ""
            say(
                f"to pay, one speculative step with k = {a.k} must cost less than "
                f"{a.mean_acceptance_length:.2f} plain decode steps{cost}; serve the same model "
                "without --speculative-config under the same load and pass it as --baseline "
                "to measure the speedup"
                + (
                    " (scrapes of both servers' /metrics: a log has no step times)"
                    if a.window.approximate
                    else ""
                )
            )
    elif (
        a.best_k is not None
        and a.best_k != a.k
        and a.expected_speedup[a.best_k] >= 1 + MARGIN  # never advise a k that does not pay
    ):
        say(
            f"set num_speculative_tokens to {a.best_k}: expected "
            f"{a.expected_speedup[a.best_k]:.2f}x against {a.expected_speedup[a.k]:.2f}x at "
            f"k = {a.k} (the acceptance curve measured here, the fitted step cost)"
        )
    if a.prefix and a.prefix[0] < 0.3:
        say(
            f"only {a.prefix[0]:.0%} of drafts get their first token accepted: check the drafter "
            "fits the target (vllm-patcher doctor --model ... --drafter ...: aux layers, "
            "vocabulary, hidden size)"
        )
    if a.verdict in (LOSES, BREAK_EVEN) and a.expected_speedup:
        best = max(a.expected_speedup.values())
        if best < 1 + MARGIN:
            say(
                "no shorter draft pays either at this load: serve without speculation, or "
                "keep it for low-concurrency traffic (try payoff bench --concurrency 1,4,16)"
            )
