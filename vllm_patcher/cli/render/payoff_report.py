"""payoff's text report: what was measured, what it means, what to change."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from ...payoff import analysis as an
from ...payoff.analysis import UNKNOWN, Analysis
from ...payoff.judge import SWEEP
from ...payoff.notes import (
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
from ...payoff.window import Window

N = TypeVar("N", bound=Note)


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
    out.extend(f"  -> {note(n, w)}" for n in a.notes if n is not a.unknown)
    if a.verdict == UNKNOWN:
        out.append(f"verdict: unknown: {note(a.unknown or NoBaseline(), w)}")
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


def to_dict(a: Analysis) -> dict[str, object]:
    """The report as JSON: the analysis's figures, its notes worded as the text report words them
    (``advice``, in order) and the reason for an unknown verdict (``unknown_reason``)."""
    data = a.to_dict()
    notes = data.pop("notes")
    add_reason(data, note(a.unknown, a.window) if a.unknown is not None else None)
    return {**data, "advice": [note(n, a.window) for n in a.notes], "notes": notes}


def add_reason(data: dict[str, Any], text: str | None) -> None:
    """``data`` (a judged object's JSON) with ``unknown_reason``, the worded reason, right after
    its ``verdict``, where a reader of the JSON finds it (payoff's, a bench point's, the
    sweep's and its cells'); here, not in ``notes``, so payoff's report stays light."""
    items = list(data.items())
    data.clear()
    for key, value in items:
        data[key] = value
        if key == "verdict":
            data["unknown_reason"] = text
    data.setdefault("unknown_reason", text)


def wider(w: Window) -> str:
    """How to get a longer window from this source: --window is for a live server only."""
    return {
        "live": "widen --window",
        "log": "give a log that covers more traffic",
        "one scrape": "save a scrape after more traffic",
        "two scrapes": "save the two scrapes further apart",
    }[an.source_kind(w)]


def _reason(why: Note) -> str:
    from .notes import reason  # the judgements' words: payoff's report on files stays light

    return reason(why)


_SIDE = MappingProxyType({"server": "the server's", "baseline": "the baseline's"})


def _running(n: UnevenLoad | MaybeUnevenLoad | StepNotLonger) -> str:
    return (
        f"requests running when read: {n.running:.1f} here, {n.baseline_running:.1f} "
        "on the baseline"
    )


def _need_baseline(n: NeedsBaseline, w: Window) -> str:
    step_s = n.step_s
    cost = f" (one speculative step took {step_s * 1000:.1f} ms here)" if step_s else ""
    log = " (scrapes of both servers' /metrics: a log has no step times)" if w.approximate else ""
    return (
        f"to pay, one speculative step with k = {n.k} must cost less than "
        f"{n.per_step:.2f} plain decode steps{cost}; serve the same model "
        "without --speculative-config under the same load and pass it as --baseline "
        f"to measure the speedup{log}"
    )


def _words(
    kind: type[N], say: Callable[[N, Window], str]
) -> tuple[type[Note], Callable[[Any, Window], str]]:
    """One entry of ``_WORDS``: a class of note and how to word one on a window (mypy checks
    that ``say`` reads attributes the class has; the table hands it notes of that class only)."""
    return kind, say


_WORDS: Mapping[type[Note], Callable[[Any, Window], str]] = MappingProxyType(
    dict(
        [
            _words(MinusOneCounter, lambda n, w: (
                f"the accepted-tokens counter ({n.accepted}) is below the per-position counts' "
                f"sum ({n.positions}): vLLM 0.11-0.14 count -1 for a step that sampled "
                "nothing; the per-position counts are used"
            )),
            _words(SmallSample, lambda n, w: (
                f"only {n.drafts} drafts in the window: the figures are noisy at this size; "
                f"{wider(w)} (or send more traffic) for {n.wanted} or more"
            )),
            _words(NotTimed, lambda n, w: (
                f"{' and '.join(_SIDE[side] for side in n.missing)} window has no "
                "decode latency samples to time (inter_token_latency_seconds: its _sum or _count "
                "did not grow), so the speedup was not measured; put the same load on both while "
                f"payoff reads them and {wider(w)}"
            )),
            _words(ThroughputNotCompared, lambda n, w: (
                "the throughput was not compared: a window's length is not known (saved scrapes "
                "with the same modification time, or one scrape per side); the verdict is the "
                "per-token time's alone"
            )),
            _words(MeasuresDisagree, lambda n, w: f"{_reason(n.why)}; {wider(w)} to settle it"),
            _words(ShortDrafts, lambda n, w: (
                f"the drafts held {n.per_draft:.2f} draft tokens per draft where the position "
                f"labels say k = {n.k} (drafts shorter than k, as n-gram or suffix drafts are, or "
                "positions left from an earlier k): no range is modelled for a shorter draft"
            )),
            _words(OtherModel, lambda n, w: (
                f"the baseline serves model_name {n.baseline_model!r} and the server {n.model!r}: "
                "give the same model served without --speculative-config (same "
                "--served-model-name)"
            )),
            _words(UnevenLoad, lambda n, w: (
                f"the two servers were not under the same load: {n.here:.1f} requests decoding on "
                f"average here, {n.there:.1f} on the baseline ({_running(n)}); put the same load "
                f"on both at the same time and {wider(w)}"
            )),
            _words(MaybeUnevenLoad, lambda n, w: (
                f"the two servers may not have been under the same load ({_running(n)}), and with "
                "no window length (saved scrapes with the same modification time, or without "
                "_created series) the requests decoding cannot be averaged: save the scrapes "
                "with their times (cp -p) or read both servers live"
            )),
            _words(StepNotLonger, lambda n, w: (
                f"a speculative step ({n.step_s * 1000:.2f} ms) took no longer than a plain one "
                f"({n.plain_step_s * 1000:.2f} ms), so the two servers were not under the same "
                f"load (or the window is too short; {_running(n)}): put the same load on both at "
                f"the same time and {wider(w)}"
            )),
            _words(NeedsBaseline, _need_baseline),
            _words(MeasureEachK, lambda n, w: (
                f"one served k cannot tell whether {', '.join(f'k = {k}' for k in n.ks)} would "
                f"pay (the two cost models' range {'crosses' if n.crossing else 'is above'} "
                f"1.0x): measure each k ({SWEEP}) before changing num_speculative_tokens"
            )),
            _words(NoShorterK, lambda n, w: (
                "under both cost models no shorter draft reaches 1.0x at this load: serve "
                "without speculation, or keep it for low-concurrency traffic (payoff bench "
                f"--concurrency 1,4,16 measures that; {SWEEP} measures each k)"
            )),
            _words(NoBaseline, lambda n, w: "no baseline: the speedup was not measured"),
            _words(LowFirstAcceptance, lambda n, w: (
                f"only {n.first:.0%} of drafts get their first token accepted: check the drafter "
                f"fits the target (vllm-patcher doctor --model {w.model or 'TARGET'} --drafter "
                "DRAFTER: aux layers, vocabulary, hidden size, the d2t map, positions)"
            )),
        ]
    )
)  # fmt: skip


def note(n: Note, w: Window) -> str:
    """A note of a report on the window ``w``, in words."""
    return _WORDS[type(n)](n, w)
