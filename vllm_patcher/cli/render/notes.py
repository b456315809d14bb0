"""Why a verdict is unknown, in words: the notes that payoff's judgements carry (``payoff.judge``,
``load.point``, ``sweep``), each a kind and its figures; ``payoff_report`` words the report's own."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ...load import point
from ...payoff.judge import DISAGREE, MARGIN, NOTHING, Note, verdict
from ...sweep import result, run


def span(values: list[float]) -> str:
    """A figure's runs: one value when they agree to 0.005, else low to high."""
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if math.isclose(lo, hi, abs_tol=5e-3) else f"{lo:.2f}x to {hi:.2f}x"


def _ks(ks: list[int]) -> str:
    return ", ".join(f"k = {k}" for k in ks)


def _disagree(f: dict[str, Any]) -> str:
    margin = f["margin"]
    said = "; ".join(
        f"{name} {span(vs)} ({' and '.join(sorted({verdict(v, margin) for v in vs}))})"
        for name, vs in f["figures"].items()
    )
    band = (
        f" (break-even within +-{margin:.0%}: the baseline's own spread)" if margin > MARGIN else ""
    )
    return f"the figures fall in different verdicts{band}: {said}"


def _more(f: dict[str, Any]) -> str:
    """How many prompts would settle figures that disagree (``payoff.judge.more_needed``)."""
    if f.get("repeat"):
        return "one run shows no spread: repeat it (--repeat 3) to see whether the verdict holds"
    if "center" in f:
        return (
            f"the figures centre on {f['center']:.2f}x, on a threshold: no number of prompts "
            "settles the class; treat it as break-even"
        )
    return (
        f"about {f['wanted']:,} prompts per run (now {f['prompts']:,}) would keep repeats this far "
        "apart in one class, if the spread shrinks as 1/sqrt(prompts)"
    )


_NOT_AGAIN: Mapping[str, Callable[[dict[str, Any]], str]] = MappingProxyType(
    {
        "failed": lambda f: "its server failed",
        "not-run": lambda f: "it was not run",
        "failed-requests": lambda f: f"{f['failed']} of its requests failed",
        "other-model": lambda f: f"it served another model: {', '.join(f['models'])}",
        "restarted": lambda f: "its server restarted under the load",
        "no-figure": lambda f: f"a run of either measurement has no {f['measure']}",
    }
)


def _tie(f: dict[str, Any]) -> str:
    def figures(k: int) -> str:
        return " / ".join(f"{span(vs)} {name}" for name, vs in f["figures"][k].items() if vs)

    said = " and ".join(f"k = {k} ({figures(k)})" for k in f["ks"])
    return (
        f"{said} tie: no one's worst run beats every other's best on per-token time and "
        "throughput alike; they all pay, none is measured to be the better"
    )


WORDS: Mapping[str, Callable[[dict[str, Any]], str]] = MappingProxyType(
    {
        NOTHING: lambda f: "nothing was measured",
        DISAGREE: _disagree,
        point.FAILED_REQUESTS: lambda f: (
            f"{f['failed']} of {f['sent']} requests failed (the client's completed/failed): the "
            "figures are not those of the load asked for"
        ),
        point.FOREIGN: lambda f: (
            f"the servers serve different models ({', '.join(f['spec'])} with speculation, "
            f"{', '.join(f['base'])} without): no speedup between them"
        ),
        point.NOISY: lambda f: (
            f"the baseline's own runs are {f['noise']:.0%} apart (more than {f['cap']:.0%}): the "
            "host is too noisy to tell a speedup from it; measure on a quiet host, or with more "
            "prompts per run"
        ),
        point.RESTARTED: lambda f: (
            f"a server's counters went down during {f['reset']} of {f['runs']} run(s): it restarted "
            "under the load, so the figures are not one server's"
        ),
        point.NO_CLIENT_FIGURES: lambda f: (
            "the benchmark client reported no per-token time or throughput"
        ),
        run.NOT_AGAIN: lambda f: (
            f"the baseline was not measured again at the end of the sweep ({_NOT_AGAIN[f['why']](f)}): "
            "no check that the host's speed held while the k were measured"
        ),
        run.SPEED_MOVED: lambda f: (
            f"the host's speed moved during the sweep: the baseline's {f['measure']} was "
            f"{f['start']:.2f} {f['unit']} at the start and {f['end']:.2f} {f['unit']} at the end "
            f"({f['end'] / f['start']:.2f}x), more than the {f['margin']:.0%} margin; run it again "
            "on a quiet host"
        ),
        result.SMALL_CELLS: lambda f: (
            f"{_ks(f['ks'])}: under {f['wanted']} drafts, too few to choose k by (raise "
            "--num-prompts or --repeat)"
        ),
        result.RESET_CELLS: lambda f: (
            f"{_ks(f['ks'])}: {'its' if len(f['ks']) == 1 else 'their'} counters were reset "
            "during a run (a restart or a metrics reset under the load), so the drafts and figures "
            "since are not the load's; run the sweep again"
        ),
        result.NOT_JUDGED: lambda f: (
            f"{_ks(f['ks'])} unknown or not measured"
            + (f"; judged to pay: k = {', '.join(map(str, f['paying']))}" if f["paying"] else "")
        ),
        result.TIE: _tie,
        result.NO_BEST_K: lambda f: (
            "no best k at some concurrency: a cell there is unknown or was not measured"
        ),
    }
)


def reason(note: Note) -> str:
    """A judgement's reason in words (and, for figures that disagree, how many prompts would
    settle them, where the judgement says)."""
    said = WORDS[note.kind](note.facts)
    return f"{said}; {_more(note.facts['more'])}" if "more" in note.facts else said


def reason_or_none(note: Note | None) -> str | None:
    return None if note is None else reason(note)
