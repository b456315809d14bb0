"""What ``payoff sweep`` found: each server it started or was given (``Started``), each measured
run (``Measured``), and the cells judged against k = 0 (``SweepResult``), whose best k per
concurrency and verdict follow ``payoff bench``'s rules. Plain data, rendered by ``cli.render.sweep.lines``
and ``to_dict``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..load.engine import Measured
from ..load.point import MEASURES, Point
from ..payoff.analysis import SMALL_SAMPLE
from ..payoff.judge import BREAK_EVEN, LOSES, PAYS, UNKNOWN, Judgement
from ..payoff.notes import NoBestK, NotJudged, ResetCells, SmallCells, Tie
from ..serving import server


@dataclass
class Started:
    k: int
    log: Path | None  # None: a server the user runs (--url)
    pid: int | None = None  # the server's process group
    ready_s: float | None = None
    under_load_s: float = 0.0  # warm-up and measured loads, scrapes included
    failure: server.StartFailure | None = None
    runs: dict[int, list[Measured]] = field(default_factory=dict)  # by concurrency
    url: str | None = None  # --url: the user's running server

    def to_dict(self) -> dict[str, object]:
        f = self.failure
        return {
            "k": self.k,
            "log": None if self.log is None else str(self.log),
            "url": self.url,
            "pid": self.pid,
            "under_load_s": round(self.under_load_s, 1),
            "ready_s": None if self.ready_s is None else round(self.ready_s, 1),
            "failure": None if f is None else f.to_dict(),
        }


@dataclass
class SweepResult:
    ks: list[int]
    concurrencies: list[int]
    repeat: int
    prompts: int
    servers: dict[int, Started]
    log_dir: Path
    cells: dict[tuple[int, int], Point] = field(default_factory=dict)  # (k, c), k >= 1
    no_drafts: list[tuple[int, int]] = field(default_factory=list)  # (k, c) served, no draft
    again: Started | None = None  # the baseline measured again after every k: the host's drift

    def best(self, c: int) -> tuple[int | None, Judgement]:
        """The best k measured at concurrency ``c``, once every k was judged there: the paying
        cell with the highest speedup, or 0 when none pays. None while a cell is unknown or was
        not run (the one not judged might be the best), its counters were reset during a run, or
        it holds too few drafts; the reason names the first of these that holds."""
        points = {k: p for (k, cc), p in self.cells.items() if cc == c}
        judged = {k: p.judgement() for k, p in points.items()}
        reset = [k for k, p in points.items() if p.reset_runs()]
        if reset:  # its drafts are those since the reset: neither too few nor enough
            return None, Judgement(UNKNOWN, ResetCells(ks=sorted(reset)))
        small = [k for k, p in points.items() if small_sample(p)]
        if small:  # no advice from a handful of drafts, whatever their figures say
            return None, Judgement(UNKNOWN, SmallCells(ks=sorted(small), wanted=SMALL_SAMPLE))
        unknown = [k for k, j in judged.items() if j.verdict == UNKNOWN]
        missing = [k for k in self.ks if k and k not in points]
        if unknown or missing:
            paying = [k for k, j in judged.items() if j.verdict == PAYS]
            return None, Judgement(UNKNOWN, NotJudged(ks=sorted(unknown + missing), paying=paying))
        top = max(points, key=lambda kk: points[kk].speedup or 0.0)
        sure = [k for k, p in points.items() if judged[k].verdict == PAYS]
        if not sure:
            return 0, judged[top]  # every k judged, none pays: serve without speculation
        tied = self.tie(c)
        if tied:
            figures = {k: _figures(points[k]) for k in tied}
            return None, Judgement(PAYS, Tie(ks=tied, figures=figures))
        best = tied_or_best(points, sure)[0]
        return best, judged[best]

    def tie(self, c: int) -> list[int]:
        """The paying k at concurrency ``c`` none of which beats all the others (no best k
        between them), or [] when one does or none pays."""
        points = {k: p for (k, cc), p in self.cells.items() if cc == c}
        sure = [k for k, p in points.items() if p.judgement().verdict == PAYS]
        found = tied_or_best(points, sure) if len(sure) > 1 else []
        return found if len(found) > 1 else []

    @property
    def no_k_pays_above(self) -> int | None:
        """The highest concurrency at which some k pays, when every higher one was judged and
        none pays there."""
        best = {c: self.best(c)[0] for c in self.concurrencies}
        paying = [c for c in self.concurrencies if best[c] or self.tie(c)]
        if not paying or paying[-1] == self.concurrencies[-1]:
            return None
        above = [c for c in self.concurrencies if c > paying[-1]]
        return paying[-1] if all(best[c] == 0 for c in above) else None

    def verdict(self) -> Judgement:
        """From the best measured cells: ``pays`` when one pays; when every k was judged at every
        concurrency and none pays, the best class met (``break-even`` over ``loses``); else
        ``unknown``."""
        bests = [self.best(c) for c in self.concurrencies]
        if any(k or j.verdict == PAYS for k, j in bests):
            return Judgement(PAYS)
        if not self.cells or any(k is None for k, _ in bests):
            return Judgement(UNKNOWN, NoBestK())
        classes = {j.verdict for _, j in bests}
        return Judgement(BREAK_EVEN if BREAK_EVEN in classes else LOSES)

    def to_dict(self) -> dict[str, object]:
        cells = []
        for (k, _), p in sorted(self.cells.items()):
            d = p.to_dict()
            d["k"] = k
            d["tokens_per_step"] = p.analysis.to_dict().get("tokens_per_step")
            d["small_sample"] = small_sample(p)
            d["failed_requests"] = p.failed_requests()[0]
            cells.append(d)
        judged = self.verdict()
        return {
            "verdict": judged.verdict,
            "unknown": judged.reason.to_dict() if judged.reason else None,
            "ks": self.ks,
            "concurrencies": self.concurrencies,
            "repeat": self.repeat,
            "num_prompts": self.prompts,
            "cells": cells,
            "baseline": {str(c): baseline_runs(self.servers.get(0), c) for c in self.concurrencies},
            "best_k": {str(c): self.best(c)[0] for c in self.concurrencies},
            "no_k_pays_above": self.no_k_pays_above,
            "servers": [s.to_dict() for _, s in sorted(self.servers.items())],
            "baseline_again": None if self.again is None else self.again.to_dict(),
            "baseline_end": {str(c): baseline_runs(self.again, c) for c in self.concurrencies},
            "ties": {str(c): t for c in self.concurrencies if (t := self.tie(c))},
            "no_drafts": [{"k": k, "concurrency": c} for k, c in self.no_drafts],
            "log_dir": str(self.log_dir) if self.log_dir != Path() else None,
        }


def small_sample(p: Point) -> bool:
    """Under ``SMALL_SAMPLE`` drafts: never the best k. A cell whose counters were reset during a
    run is not: its count is since the reset, and the reset is what it is said for."""
    return p.analysis.drafts < SMALL_SAMPLE and not p.reset_runs()


def tied_or_best(points: dict[int, Point], sure: list[int]) -> list[int]:
    """[the paying k that beats every other paying k], or the paying k that tie: those not
    beaten by another (a cell with no client figure cannot be ranked: it ties)."""
    winners = [k for k in sure if all(_beats(points[k], points[o]) for o in sure if o != k)]
    if winners:
        return winners[:1]
    unbeaten = [k for k in sure if not any(_beats(points[o], points[k]) for o in sure if o != k)]
    return sorted(unbeaten or sure)


def _beats(first: Point, second: Point) -> bool:
    """``first``'s worst run beats ``second``'s best on the per-token figure and on throughput
    alike (the client's two measures)."""
    a, b = first.series(), second.series()
    for measure in MEASURES[:2]:
        if not a[measure] or not b[measure] or min(a[measure]) <= max(b[measure]):
            return False
    return True


def _figures(point: Point) -> dict[str, list[float]]:
    """The client's two measures of a cell, each run's: what a tie is shown with."""
    series = point.series()
    return {n: series[m] for m, n in zip(MEASURES[:2], ("per-token", "throughput"), strict=True)}


def baseline_runs(started: Started | None, c: int) -> dict[str, object] | None:
    if started is None or not started.runs.get(c):
        return None
    runs = started.runs[c]
    tpot = [r.result.get("mean_tpot_ms") for r in runs]
    tput = [r.result.get("output_throughput") for r in runs]
    return {
        "tpot_ms": [t for t in tpot if isinstance(t, int | float)],
        "throughput": [t for t in tput if isinstance(t, int | float)],
    }
