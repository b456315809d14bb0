"""One concurrency's load on a speculative server and on a plain one, repeated: each run's client
results and /metrics windows (``Run``), and the concurrency's figures, their spread and its
verdict (``Point``): both measures (``MEASURES``: the per-token time ratio and the output
throughput ratio from the client, the per-token time ratio from each server's /metrics
difference), judged by ``payoff.judge`` (every figure in one class, or ``unknown``). ``payoff
bench`` makes one per concurrency, ``payoff sweep`` one per cell (k, concurrency)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..payoff.analysis import Analysis
from ..payoff.judge import MARGIN, NOISE_CAP, UNKNOWN, Judgement, judge, more_needed
from ..payoff.notes import (
    DifferentModels,
    FailedRequests,
    FiguresDisagree,
    NoClientFigures,
    NoisyBaseline,
    Note,
    Restarted,
)
from ..payoff.window import Window
from .repeats import failures

MEASURES = ("per-token time (client)", "throughput (client)", "per-token time (/metrics)")


@dataclass
class Run:
    """One run of the load on each server at one concurrency."""

    spec: dict[str, Any]  # the client's result file: output_throughput, mean_tpot_ms, ...
    base: dict[str, Any]
    window: Window  # the speculative server's /metrics difference over its run
    base_window: Window

    def figures(self) -> dict[str, float | None]:
        return dict(
            zip(
                MEASURES,
                (
                    _ratio(self.base.get("mean_tpot_ms"), self.spec.get("mean_tpot_ms")),
                    _ratio(self.spec.get("output_throughput"), self.base.get("output_throughput")),
                    _ratio(_per_token_s(self.base_window), _per_token_s(self.window)),
                ),
                strict=True,
            )
        )


def _ratio(top: Any, bottom: Any) -> float | None:
    if not isinstance(top, int | float) or not isinstance(bottom, int | float):
        return None
    return top / bottom if top > 0 and bottom > 0 else None


def _per_token_s(w: Window) -> float | None:
    return w.step_seconds / w.emitted if w.emitted > 0 and w.step_seconds > 0 else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass
class Point:
    concurrency: int
    runs: list[Run]
    analysis: Analysis  # this concurrency's own windows: its acceptance
    prompts: int = 0
    noise: float = 0.0  # the baseline's own spread over its runs: break-even is at least this wide
    drift: Note | None = None  # why the baseline's runs cannot stand for one host's speed

    def series(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {m: [] for m in MEASURES}
        for run in self.runs:
            for name, value in run.figures().items():
                if value is not None:
                    out[name].append(value)
        return out

    @property
    def speedup(self) -> float | None:
        return _mean(self.series()[MEASURES[0]])

    def failed_requests(self) -> tuple[int, int]:
        """(requests that failed, requests sent) over the runs, both servers: the client's
        ``failed``, or the prompts it sent less those it ``completed``."""
        return failures([r for run in self.runs for r in (run.spec, run.base)], self.prompts)

    @property
    def margin(self) -> float:
        """The break-even band's half width: 5%, or the baseline's own spread when wider."""
        return max(MARGIN, min(self.noise, NOISE_CAP))

    def foreign(self) -> DifferentModels | None:
        """Why the two servers cannot be set against each other: they serve different models
        (their /metrics ``model_name``), or None."""
        spec = {run.window.model for run in self.runs if run.window.model}
        base = {run.base_window.model for run in self.runs if run.base_window.model}
        if spec and base and spec != base:
            return DifferentModels(spec=sorted(spec), base=sorted(base))
        return None

    def reset_runs(self) -> int:
        """The runs during which either server's counters went down (a restart, a metrics
        reset): their windows are since the reset, so neither their drafts nor their figures
        are the load's."""
        return sum(1 for run in self.runs if run.window.reset or run.base_window.reset)

    def judgement(self) -> Judgement:
        failed, sent = self.failed_requests()
        if failed:  # a server that answered some requests with errors is not measured
            return Judgement(UNKNOWN, FailedRequests(failed=failed, sent=sent))
        foreign = self.foreign()
        if foreign:
            return Judgement(UNKNOWN, foreign)
        if self.drift:
            return Judgement(UNKNOWN, self.drift)
        if self.noise > NOISE_CAP:  # break-even that wide would hide a 3x loss
            return Judgement(UNKNOWN, NoisyBaseline(noise=self.noise, cap=NOISE_CAP))
        reset = self.reset_runs()
        if reset:  # a window since a restart is not the load's: its client figures may hold
            # requests the dead server never finished either
            return Judgement(UNKNOWN, Restarted(reset=reset, runs=len(self.runs)))
        series = self.series()
        if not series[MEASURES[0]] and not series[MEASURES[1]]:
            return Judgement(UNKNOWN, NoClientFigures())
        judged = judge(series, self.margin)
        if not isinstance(judged.reason, FiguresDisagree):  # the judge's one reason given figures
            return judged
        values = [v for vs in series.values() for v in vs]
        hint = (
            more_needed(values, self.prompts, self.margin)
            if len(self.runs) > 1
            else more_needed([], self.prompts, self.margin)
        )
        return Judgement(UNKNOWN, dataclasses.replace(judged.reason, more=hint))

    def to_dict(self) -> dict[str, object]:
        series = self.series()
        judged = self.judgement()
        acceptance = self.analysis.to_dict()

        def mean_of(key: str, side: str) -> float | None:
            values = [
                v for run in self.runs if isinstance(v := getattr(run, side).get(key), int | float)
            ]
            return _r(_mean(values))

        return {
            "concurrency": self.concurrency,
            "verdict": judged.verdict,
            "unknown": judged.reason.to_dict() if judged.reason else None,
            "repeats": len(self.runs),
            "margin": round(self.margin, 4),
            "speedup": _r(_mean(series[MEASURES[0]])),
            "speedup_spread": _spread(series[MEASURES[0]]),
            "throughput_ratio": _r(_mean(series[MEASURES[1]])),
            "throughput_ratio_spread": _spread(series[MEASURES[1]]),
            "metrics_speedup": _r(_mean(series[MEASURES[2]])),
            "metrics_speedup_spread": _spread(series[MEASURES[2]]),
            "throughput": mean_of("output_throughput", "spec"),
            "baseline_throughput": mean_of("output_throughput", "base"),
            "tpot_ms": mean_of("mean_tpot_ms", "spec"),
            "baseline_tpot_ms": mean_of("mean_tpot_ms", "base"),
            "acceptance_rate": acceptance["acceptance_rate"],
            "mean_acceptance_length": acceptance["mean_acceptance_length"],
            "per_position": acceptance["per_position"],
            "drafts": acceptance["drafts"],
        }


def _spread(values: list[float]) -> list[float] | None:
    return [round(min(values), 4), round(max(values), 4)] if values else None
