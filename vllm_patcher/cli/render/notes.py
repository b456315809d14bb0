"""Why a verdict is unknown, in words: the notes that payoff's judgements carry (``payoff.judge``,
``load.point``, ``sweep``), each a class of ``payoff.notes`` worded by its entry in ``WORDS``;
``payoff_report`` words the report's own."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from ...payoff.judge import MARGIN, verdict
from ...payoff.notes import (
    BaselineNotAgain,
    DifferentModels,
    FailedRequests,
    FiguresDisagree,
    More,
    MorePrompts,
    NoBestK,
    NoClientFigures,
    NoisyBaseline,
    Note,
    NothingMeasured,
    NotJudged,
    OnThreshold,
    ResetCells,
    Restarted,
    SmallCells,
    SpeedMoved,
    Tie,
)

N = TypeVar("N", bound=Note)


def _words(kind: type[N], say: Callable[[N], str]) -> tuple[type[Note], Callable[[Any], str]]:
    """One entry of ``WORDS``: a class of note and how to word one (mypy checks that
    ``say`` reads attributes the class has; the table hands it notes of that class only)."""
    return kind, say


def span(values: list[float]) -> str:
    """A figure's runs: one value when they agree to 0.005, else low to high."""
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if math.isclose(lo, hi, abs_tol=5e-3) else f"{lo:.2f}x to {hi:.2f}x"


def _ks(ks: list[int]) -> str:
    return ", ".join(f"k = {k}" for k in ks)


def _disagree(n: FiguresDisagree) -> str:
    margin = n.margin
    said = "; ".join(
        f"{name} {span(vs)} ({' and '.join(sorted({verdict(v, margin) for v in vs}))})"
        for name, vs in n.figures.items()
    )
    band = (
        f" (break-even within +-{margin:.0%}: the baseline's own spread)" if margin > MARGIN else ""
    )
    return f"the figures fall in different verdicts{band}: {said}"


def _more(hint: More) -> str:
    """How many prompts would settle figures that disagree (``payoff.judge.more_needed``)."""
    if isinstance(hint, OnThreshold):
        return (
            f"the figures centre on {hint.center:.2f}x, on a threshold: no number of prompts "
            "settles the class; treat it as break-even"
        )
    if isinstance(hint, MorePrompts):
        return (
            f"about {hint.wanted:,} prompts per run (now {hint.prompts:,}) would keep repeats this "
            "far apart in one class, if the spread shrinks as 1/sqrt(prompts)"
        )
    return "one run shows no spread: repeat it (--repeat 3) to see whether the verdict holds"


_NOT_AGAIN: Mapping[str, Callable[[BaselineNotAgain], str]] = MappingProxyType(
    {
        "failed": lambda n: "its server failed",
        "not-run": lambda n: "it was not run",
        "failed-requests": lambda n: f"{n.failed} of its requests failed",
        "other-model": lambda n: f"it served another model: {', '.join(n.models or [])}",
        "restarted": lambda n: "its server restarted under the load",
        "no-figure": lambda n: f"a run of either measurement has no {n.measure}",
    }
)


def _tie(n: Tie) -> str:
    def figures(k: int) -> str:
        return " / ".join(f"{span(vs)} {name}" for name, vs in n.figures[k].items() if vs)

    said = " and ".join(f"k = {k} ({figures(k)})" for k in n.ks)
    return (
        f"{said} tie: no one's worst run beats every other's best on per-token time and "
        "throughput alike; they all pay, none is measured to be the better"
    )


WORDS: Mapping[type[Note], Callable[[Any], str]] = MappingProxyType(
    dict(
        [
            _words(NothingMeasured, lambda n: "nothing was measured"),
            _words(FiguresDisagree, _disagree),
            _words(FailedRequests, lambda n: (
                f"{n.failed} of {n.sent} requests failed (the client's completed/failed): the "
                "figures are not those of the load asked for"
            )),
            _words(DifferentModels, lambda n: (
                f"the servers serve different models ({', '.join(n.spec)} with speculation, "
                f"{', '.join(n.base)} without): no speedup between them"
            )),
            _words(NoisyBaseline, lambda n: (
                f"the baseline's own runs are {n.noise:.0%} apart (more than {n.cap:.0%}): the "
                "host is too noisy to tell a speedup from it; measure on a quiet host, or with "
                "more prompts per run"
            )),
            _words(Restarted, lambda n: (
                f"a server's counters went down during {n.reset} of {n.runs} run(s): it "
                "restarted under the load, so the figures are not one server's"
            )),
            _words(NoClientFigures, lambda n: (
                "the benchmark client reported no per-token time or throughput"
            )),
            _words(BaselineNotAgain, lambda n: (
                "the baseline was not measured again at the end of the sweep "
                f"({_NOT_AGAIN[n.why](n)}): no check that the host's speed held while the k "
                "were measured"
            )),
            _words(SpeedMoved, lambda n: (
                f"the host's speed moved during the sweep: the baseline's {n.measure} was "
                f"{n.start:.2f} {n.unit} at the start and {n.end:.2f} {n.unit} at the end "
                f"({n.end / n.start:.2f}x), more than the {n.margin:.0%} margin; run it again "
                "on a quiet host"
            )),
            _words(SmallCells, lambda n: (
                f"{_ks(n.ks)}: under {n.wanted} drafts, too few to choose k by (raise "
                "--num-prompts or --repeat)"
            )),
            _words(ResetCells, lambda n: (
                f"{_ks(n.ks)}: {'its' if len(n.ks) == 1 else 'their'} counters were reset "
                "during a run (a restart or a metrics reset under the load), so the drafts and "
                "figures since are not the load's; run the sweep again"
            )),
            _words(NotJudged, lambda n: (
                f"{_ks(n.ks)} unknown or not measured"
                + (f"; judged to pay: k = {', '.join(map(str, n.paying))}" if n.paying else "")
            )),
            _words(Tie, _tie),
            _words(NoBestK, lambda n: (
                "no best k at some concurrency: a cell there is unknown or was not measured"
            )),
        ]
    )
)  # fmt: skip


def reason(note: Note) -> str:
    """A judgement's reason in words (and, for figures that disagree, how many prompts would
    settle them, where the judgement says)."""
    said = WORDS[type(note)](note)
    more = note.more if isinstance(note, FiguresDisagree) else None
    return said if more is None else f"{said}; {_more(more)}"


def reason_or_none(note: Note | None) -> str | None:
    return None if note is None else reason(note)
