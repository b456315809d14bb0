"""From a window of a speculative server (and one of a plain server under the same load): the
acceptance figures, the two measures of speed, a verdict that needs both to agree, and, for each
shorter draft, a range between two cost models (``judge``), never a figure or advice. What it
notes or advises is a ``Note`` (``notes``: a kind and the figures behind it); the command line
words it.

The figures, in one place:
- The count at position i is the number of drafts whose first i+1 tokens were all accepted, so
  ``prefix[i] = per_pos[i] / drafts``.
- A decode step's time is one sample of ``inter_token_latency_seconds`` (one per request and
  step); the per-token time is the steps' time over the tokens they emitted, and the tokens per
  step are measured the same way (steps without a draft emit one token and count as such).
- The per-token time ratio (plain over speculative) is ``speedup``; the output throughput ratio
  is the tokens each server emitted per second of its window. The two differ by the ratio of
  requests decoding (the steps' time over the window's length): when that differs, the two
  servers were not under the same load and there is no verdict.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .judge import (
    BREAK_EVEN,
    LOSES,
    MARGIN,
    PAYS,
    RANGE_MODEL,
    UNKNOWN,
    judge,
    shorter_k_range,
    verdict,
)
from .notes import (
    LowFirstAcceptance,
    MaybeUnevenLoad,
    MeasureEachK,
    MeasuresDisagree,
    MinusOneCounter,
    NeedsBaseline,
    NoBaseline,
    NoShorterK,
    Note,
    NotTimed,
    OtherModel,
    ShortDrafts,
    SmallSample,
    StepNotLonger,
    ThroughputNotCompared,
    UnevenLoad,
)
from .scrape import is_url
from .window import Window

__all__ = ["BREAK_EVEN", "LOSES", "PAYS", "UNKNOWN", "Analysis", "analyse", "verdict"]

SMALL_SAMPLE = 500  # drafts; a tryout's 5 s windows of 50-150 drafts swung from 0.36x to 3.67x
SAME_LOAD = 1.5  # requests decoding on one side at most this many times the other's


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
    speedup: float | None = None  # the per-token time ratio, plain over speculative
    throughput_ratio: float | None = None  # tokens per second, speculative over plain
    tokens_per_s: float | None = None
    baseline_tokens_per_s: float | None = None
    shorter_k_range: dict[int, tuple[float, float]] = field(default_factory=dict)
    break_even_length: float | None = None
    verdict: str = UNKNOWN
    unknown: Note | None = None  # why the verdict is unknown (``analyse`` always says)
    notes: list[Note] = field(default_factory=list)  # in order; ``unknown`` is one of them

    @property
    def draft_tokens_per_draft(self) -> float | None:
        w = self.window
        return w.draft_tokens / w.drafts if w.drafts else None

    def to_dict(self) -> dict[str, object]:
        w, b = self.window, self.baseline
        return {
            "verdict": self.verdict,
            "speedup": _round(self.speedup),
            "throughput_ratio": _round(self.throughput_ratio),
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "per_position": [_round(p) for p in self.prefix],
            "conditional": [_round(p) for p in self.conditional],
            "k": self.k,
            "draft_tokens_per_draft": _round(self.draft_tokens_per_draft),
            "shorter_k_range": {
                str(k): {"low": _round(lo), "high": _round(hi)}
                for k, (lo, hi) in self.shorter_k_range.items()
            },
            "shorter_k_model": RANGE_MODEL if self.shorter_k_range else None,
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
            "tokens_per_s": _round(self.tokens_per_s),
            "baseline_per_token_ms": _ms(self.baseline_per_token_s),
            "baseline_tokens_per_s": _round(self.baseline_tokens_per_s),
            "requests_decoding": _round(w.decoding),
            "baseline_requests_decoding": _round(b.decoding) if b else None,
            "mean_batch": _round(w.running),
            "baseline_mean_batch": _round(b.running) if b else None,
            "source": w.source,
            "baseline": b.source if b else None,
            "notes": [n.to_dict() for n in self.notes],
        }


def _round(value: float | None, places: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, places)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else round(seconds * 1000, 3)


def source_kind(w: Window) -> str:
    """Where a window came from, which decides how to get a longer one: ``live`` (a server's
    URL), ``log``, ``one scrape`` (its window is since the server started) or ``two scrapes``."""
    if is_url(w.source):
        return "live"
    if w.approximate:
        return "log"
    return "one scrape" if w.since_start else "two scrapes"


def _per_token(w: Window) -> tuple[float | None, float | None, float | None]:
    """Tokens per step, step time, per-token time of a window's decode steps."""
    if w.steps <= 0 or w.emitted <= 0 or w.step_seconds <= 0:
        return None, None, None
    return w.emitted / w.steps, w.step_seconds / w.steps, w.step_seconds / w.emitted


def analyse(w: Window, baseline: Window | None = None) -> Analysis:
    """Figures for a window with drafts (the caller refuses one without)."""
    notes: list[Note] = []
    if sum(w.per_pos) > w.accepted and w.approximate:  # rounding of the log's figures
        w = dataclasses.replace(w, accepted=float(sum(w.per_pos)))
    elif sum(w.per_pos) > w.accepted:
        # vLLM 0.11-0.14 count -1 accepted for a step with no sampled token; the per-position
        # counts (a prefix count each) hold the true number of accepted tokens
        notes.append(MinusOneCounter(accepted=int(w.accepted), positions=int(sum(w.per_pos))))
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
        notes.append(SmallSample(drafts=int(w.drafts), wanted=SMALL_SAMPLE))
    a.notes.extend(notes)
    if baseline is None:
        _unknown(a, NoBaseline())
    else:
        _with_baseline(a, baseline)
    _advise(a)
    return a


def _with_baseline(a: Analysis, baseline: Window) -> None:
    w = a.window
    _, t0, base_per_token = _per_token(baseline)
    a.baseline_per_token_s = base_per_token
    missing = [
        name
        for name, value in (("server", a.per_token_s), ("baseline", base_per_token))
        if value is None
    ]
    if missing:
        _unknown(a, NotTimed(missing=missing))
        return
    assert a.per_token_s is not None and base_per_token is not None and t0 is not None
    assert a.step_s is not None
    a.speedup = base_per_token / a.per_token_s
    if w.seconds and baseline.seconds and w.seconds > 0 and baseline.seconds > 0:
        a.tokens_per_s = w.emitted / w.seconds
        a.baseline_tokens_per_s = baseline.emitted / baseline.seconds
        a.throughput_ratio = a.tokens_per_s / a.baseline_tokens_per_s
    reason = _not_comparable(a, baseline, t0)
    if reason:
        _unknown(a, reason)
        return
    figures = {"per-token time": [a.speedup]}
    if a.throughput_ratio is not None:
        figures["throughput"] = [a.throughput_ratio]
    else:
        a.notes.append(ThroughputNotCompared())
    judged = judge(figures)
    a.verdict = judged.verdict
    if judged.reason:
        _unknown(a, MeasuresDisagree(why=judged.reason))
        return
    a.break_even_length = a.step_s / t0
    per_draft = a.draft_tokens_per_draft or 0.0
    if a.k >= 2 and abs(per_draft - a.k) > 0.01:
        a.notes.append(ShortDrafts(per_draft=per_draft, k=a.k))
    elif a.tokens_per_step is not None:
        a.shorter_k_range = shorter_k_range(
            a.speedup, a.k, w.per_pos, w.steps, a.tokens_per_step, a.step_s, t0
        )


def _not_comparable(a: Analysis, baseline: Window, t0: float) -> Note | None:
    """Why the two windows are not one load on the same model, or None."""
    w = a.window
    if w.model and baseline.model and w.model != baseline.model:
        return OtherModel(model=w.model, baseline_model=baseline.model)
    here, there = w.decoding, baseline.decoding
    now, then = w.running or 0.0, baseline.running or 0.0  # requests running when read
    if here and there and max(here, there) / min(here, there) > SAME_LOAD:
        return UnevenLoad(here=here, there=there, running=now, baseline_running=then)
    # no window length to average over: the gauges read are all
    if not (here and there) and max(now, then) > SAME_LOAD * max(min(now, then), 1.0):
        return MaybeUnevenLoad(running=now, baseline_running=then)
    if a.k and a.step_s is not None and a.step_s <= t0:
        return StepNotLonger(step_s=a.step_s, plain_step_s=t0, running=now, baseline_running=then)
    return None


def _unknown(a: Analysis, note: Note) -> None:
    a.verdict = UNKNOWN
    a.unknown = note
    a.notes.append(note)


def _advise(a: Analysis) -> None:
    """What to do next, from what was measured (a shorter draft only ever gets a range)."""
    say = a.notes.append
    if a.baseline is None:
        if a.mean_acceptance_length is not None:
            per_step = a.tokens_per_step or a.mean_acceptance_length
            say(NeedsBaseline(k=a.k, per_step=per_step, step_s=a.step_s))
    elif a.shorter_k_range:
        crossing = [k for k, (lo, hi) in a.shorter_k_range.items() if lo < 1 < hi]
        above = [k for k, (lo, _) in a.shorter_k_range.items() if lo >= 1 + MARGIN]
        if crossing or above:
            say(MeasureEachK(ks=crossing + above, crossing=bool(crossing)))
        elif a.verdict in (LOSES, BREAK_EVEN):
            say(NoShorterK())
    if a.prefix and a.prefix[0] < 0.3:
        say(LowFirstAcceptance(first=a.prefix[0]))
