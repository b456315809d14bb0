"""Verdicts that hold under noise, and what one served k can say about a shorter one.

A verdict needs every figure behind it in one class: both measures (the per-token time ratio and
the output throughput ratio over the same load) and, with repeats, every repeat of each. Figures
that fall in different classes give ``unknown`` with the figures, never the class of one of them.

A shorter draft k' < k is never measured from one served k, so it gets a range between two cost
models, not a figure: all of the extra cost of a speculative step fixed (``T(k') = T(k)``: the low
end) and all of it per draft token (``T(k') = T(0) + k' c``, c fitted from the two servers: the
high end). The tokens a step emits at k' are the measured tokens per step less what positions
k'..k-1 contributed, so steps without a draft count as what they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .notes import (
    FiguresDisagree,
    More,
    MorePrompts,
    Note,
    NothingMeasured,
    OnThreshold,
    RepeatRuns,
)

PAYS, BREAK_EVEN, LOSES, UNKNOWN = "pays", "break-even", "loses", "unknown"
MARGIN = 0.05  # within +-5% of 1.0x is break-even
NOISE_CAP = 2 * MARGIN  # a baseline whose own runs spread wider than this settles no class
RANGE_MODEL = (
    "two cost models from one served k, not a measurement: low = a speculative step costs the "
    "same at every k (T(k') = T(k)), high = all of its extra cost is per draft token "
    "(T(k') = T(0) + k' c)"
)
SWEEP = "vllm-patcher payoff sweep"  # measures each k; the only source of advice to change k


def verdict(speedup: float, margin: float = MARGIN) -> str:
    """``margin``: the band around 1.0x that is break-even (wider where the baseline's own runs
    spread wider: a difference inside the host's noise is no difference)."""
    if speedup >= 1 + margin:
        return PAYS
    if speedup <= 1 - margin:
        return LOSES
    return BREAK_EVEN


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: Note | None = None  # why it is unknown


def judge(figures: dict[str, list[float]], margin: float = MARGIN) -> Judgement:
    """One class for every value of every measure, or ``unknown`` naming them all."""
    values = [v for vs in figures.values() for v in vs]
    if not values:
        return Judgement(UNKNOWN, NothingMeasured())
    classes = {verdict(v, margin) for v in values}
    if len(classes) == 1:
        return Judgement(classes.pop())
    said = {name: list(vs) for name, vs in figures.items() if vs}
    return Judgement(UNKNOWN, FiguresDisagree(figures=said, margin=margin))


def spread(values: list[float]) -> float:
    """How far apart repeats of one figure are, relative to their mean (0 for fewer than two)."""
    if len(values) < 2 or min(values) <= 0:
        return 0.0
    return (max(values) - min(values)) / (sum(values) / len(values))


def room(center: float, margin: float = MARGIN) -> float:
    """How far a figure may move before it changes class."""
    if center >= 1 + margin:
        return center - (1 + margin)
    if center <= 1 - margin:
        return (1 - margin) - center
    return min(1 + margin - center, center - (1 - margin))


def more_needed(values: list[float], prompts: int, margin: float = MARGIN) -> More:
    """How many prompts per run would make repeats this far apart fall in one class (a model:
    a run's spread shrinks as 1/sqrt(prompts)); ``margin``: the break-even band used.
    ``RepeatRuns`` for one run (no spread to go by), ``OnThreshold`` when the figures centre on a
    threshold (no number settles it), else ``MorePrompts``."""
    if len(values) < 2:
        return RepeatRuns()
    center = sum(values) / len(values)
    half = max(abs(v - center) for v in values)
    free = room(center, margin)
    if free < 0.005:
        return OnThreshold(center=center)
    return MorePrompts(wanted=math.ceil(prompts * (half / free) ** 2), prompts=prompts)


def shorter_k_range(
    speedup: float,
    k: int,
    per_pos: tuple[float, ...],
    steps: float,
    tokens_per_step: float,
    step_s: float,
    plain_step_s: float,
) -> dict[int, tuple[float, float]]:
    """For each k' < k: (low, high) speedup under the two cost models (see the module)."""
    out: dict[int, tuple[float, float]] = {}
    if k < 2 or steps <= 0 or tokens_per_step <= 0 or step_s <= plain_step_s:
        return out
    per_token_cost = (step_s - plain_step_s) / k
    for kk in range(1, k):
        emitted = tokens_per_step - sum(per_pos[kk:]) / steps
        low = speedup * emitted / tokens_per_step
        high = low * step_s / (plain_step_s + kk * per_token_cost)
        out[kk] = (low, high)
    return out
