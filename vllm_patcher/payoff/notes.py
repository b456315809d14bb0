"""What a judgement or a report says beyond its figures (why a verdict is unknown, what to do
next): one frozen dataclass per kind of note. ``kind`` is the name ``--json`` gives it, the fields
are the figures it rests on, in the order ``--json`` writes them (each given by keyword, so a
figure renamed or left out fails the type check where a note is made or worded), and the class's
name is its kind in CamelCase. The command line words each class: ``cli/render/notes.py`` a
judgement's reason, ``cli/render/payoff_report.py`` payoff's report.

Every kind is here, grouped by the module that makes it (``payoff.judge``, ``payoff.analysis``,
``load.point``, ``sweep.result``, ``sweep.run``) rather than beside it: together they are the
JSON's ``note`` (one module lists every kind a reader of ``--json`` meets, with its figures, and
every attribute a renderer reads), and ``payoff`` is the package ``load`` and ``sweep`` import, so
a note never needs an import upward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeAlias

# A field's metadata: the field is left out of the JSON when it is None (an optional figure).
ABSENT_IF_NONE = MappingProxyType({"absent_if_none": True})


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Named figures: ``to_dict`` gives them in the order declared, floats to 6 significant
    digits (the figures behind a verdict, not their display), a figure that is not finite as
    null, a field marked ``ABSENT_IF_NONE`` left out while it is None."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None or not f.metadata.get("absent_if_none"):
                out[f.name] = _plain(value)
        return out


@dataclass(frozen=True, kw_only=True)
class Note(Facts):
    """A note: its ``kind`` first in the JSON, then its figures."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **super().to_dict()}


def _plain(value: Any) -> Any:
    if isinstance(value, Facts):
        return value.to_dict()
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# payoff.judge: why a judgement is unknown.
@dataclass(frozen=True, kw_only=True)
class NothingMeasured(Note):
    kind = "nothing-measured"


@dataclass(frozen=True, kw_only=True)
class RepeatRuns(Facts):
    """One run shows no spread: repeat it (``more_needed``'s hint)."""

    repeat: bool = True


@dataclass(frozen=True, kw_only=True)
class OnThreshold(Facts):
    """The figures centre on a threshold: no number of prompts settles them."""

    center: float


@dataclass(frozen=True, kw_only=True)
class MorePrompts(Facts):
    """About ``wanted`` prompts per run (now ``prompts``) would keep repeats in one class."""

    wanted: int
    prompts: int


More: TypeAlias = RepeatRuns | OnThreshold | MorePrompts


@dataclass(frozen=True, kw_only=True)
class FiguresDisagree(Note):
    kind = "figures-disagree"
    figures: dict[str, list[float]]  # {measure: values}
    margin: float
    more: More | None = field(default=None, metadata=ABSENT_IF_NONE)  # load.point's hint


# payoff.analysis: what a report notes or advises.
@dataclass(frozen=True, kw_only=True)
class MinusOneCounter(Note):
    """vLLM 0.11-0.14 counted -1 accepted for an empty step."""

    kind = "minus-one-counter"
    accepted: int
    positions: int


@dataclass(frozen=True, kw_only=True)
class SmallSample(Note):
    kind = "small-sample"
    drafts: int
    wanted: int


@dataclass(frozen=True, kw_only=True)
class NotTimed(Note):
    kind = "not-timed"
    missing: list[str]  # the windows with no decode latency samples: "server", "baseline"


@dataclass(frozen=True, kw_only=True)
class ThroughputNotCompared(Note):
    """A window's length is not known."""

    kind = "throughput-not-compared"


@dataclass(frozen=True, kw_only=True)
class MeasuresDisagree(Note):
    kind = "measures-disagree"
    why: Note  # the judge's


@dataclass(frozen=True, kw_only=True)
class ShortDrafts(Note):
    """Drafts shorter than the position labels say."""

    kind = "short-drafts"
    per_draft: float
    k: int


@dataclass(frozen=True, kw_only=True)
class OtherModel(Note):
    kind = "other-model"
    model: str
    baseline_model: str


@dataclass(frozen=True, kw_only=True)
class UnevenLoad(Note):
    kind = "uneven-load"
    here: float  # requests decoding on average
    there: float
    running: float
    baseline_running: float


@dataclass(frozen=True, kw_only=True)
class MaybeUnevenLoad(Note):
    """No window length to average the requests decoding over."""

    kind = "maybe-uneven-load"
    running: float
    baseline_running: float


@dataclass(frozen=True, kw_only=True)
class StepNotLonger(Note):
    kind = "step-not-longer"
    step_s: float
    plain_step_s: float
    running: float
    baseline_running: float


@dataclass(frozen=True, kw_only=True)
class NeedsBaseline(Note):
    kind = "needs-baseline"
    k: int
    per_step: float
    step_s: float | None


@dataclass(frozen=True, kw_only=True)
class MeasureEachK(Note):
    """The cost models' range does not settle these k."""

    kind = "measure-each-k"
    ks: list[int]
    crossing: bool


@dataclass(frozen=True, kw_only=True)
class NoShorterK(Note):
    """No shorter draft reaches 1.0x under either cost model."""

    kind = "no-shorter-k"


@dataclass(frozen=True, kw_only=True)
class LowFirstAcceptance(Note):
    kind = "low-first-acceptance"
    first: float  # the share of drafts with their first token accepted


@dataclass(frozen=True, kw_only=True)
class NoBaseline(Note):
    """No plain server to set the window against: no speedup measured."""

    kind = "no-baseline"


# load.point: why a point's verdict is unknown.
@dataclass(frozen=True, kw_only=True)
class FailedRequests(Note):
    kind = "failed-requests"
    failed: int
    sent: int


@dataclass(frozen=True, kw_only=True)
class DifferentModels(Note):
    kind = "different-models"
    spec: list[str]  # the models each side served
    base: list[str]


@dataclass(frozen=True, kw_only=True)
class NoisyBaseline(Note):
    kind = "noisy-baseline"
    noise: float
    cap: float


@dataclass(frozen=True, kw_only=True)
class Restarted(Note):
    kind = "restarted"
    reset: int  # runs during which a server's counters went down
    runs: int


@dataclass(frozen=True, kw_only=True)
class NoClientFigures(Note):
    kind = "no-client-figures"


# sweep.result: why a concurrency has no best k, or the sweep no verdict.
@dataclass(frozen=True, kw_only=True)
class SmallCells(Note):
    kind = "small-cells"
    ks: list[int]  # cells under ``wanted`` drafts
    wanted: int


@dataclass(frozen=True, kw_only=True)
class ResetCells(Note):
    kind = "reset-cells"
    ks: list[int]  # cells whose counters were reset during a run (no count to go by)


@dataclass(frozen=True, kw_only=True)
class NotJudged(Note):
    kind = "not-judged"
    ks: list[int]  # unknown or not measured
    paying: list[int]


@dataclass(frozen=True, kw_only=True)
class Tie(Note):
    """They all pay, none beats the others."""

    kind = "tie"
    ks: list[int]
    figures: dict[int, dict[str, list[float]]]  # {k: {measure: values}}


@dataclass(frozen=True, kw_only=True)
class NoBestK(Note):
    kind = "no-best-k"


# sweep.run: why the baseline's two measurements cannot stand for one host's speed.
NotAgainWhy: TypeAlias = Literal[
    "failed", "not-run", "failed-requests", "other-model", "restarted", "no-figure"
]


@dataclass(frozen=True, kw_only=True)
class BaselineNotAgain(Note):
    """The baseline was not measured again at the end, or that measurement cannot stand for
    the first; each ``why`` with its own figure, if any."""

    kind = "baseline-not-again"
    why: NotAgainWhy
    failed: int | None = field(default=None, metadata=ABSENT_IF_NONE)  # failed-requests
    models: list[str] | None = field(default=None, metadata=ABSENT_IF_NONE)  # other-model
    measure: str | None = field(default=None, metadata=ABSENT_IF_NONE)  # no-figure


@dataclass(frozen=True, kw_only=True)
class SpeedMoved(Note):
    kind = "speed-moved"
    measure: str
    unit: str
    start: float
    end: float
    margin: float
