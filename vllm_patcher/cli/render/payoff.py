"""What payoff's report and payoff bench show, as text and as JSON (payoff sweep: ``sweep``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import EXIT_OK, NotWritable
from ...payoff.judge import UNKNOWN
from .. import outcomes
from ..base import Shown

if TYPE_CHECKING:  # typing only: payoff bench loads its machinery when it runs
    from ...events import SweepOpening
    from ...load.bench import BenchResult
    from ...payoff.analysis import Analysis
    from ...payoff.run import Retry
    from ...sweep.result import SweepResult

CLEAR_SCREEN = "\x1b[H\x1b[2J"


def report(shown: Analysis | Retry, clear: bool) -> Shown:
    """One report of payoff (``--watch``: one per window), or a note on a window it could not
    judge (text only: under --json only full reports are printed); ``clear``: the screen is
    cleared first (a refresh on a terminal)."""
    from ...payoff.run import Retry

    if isinstance(shown, Retry):
        said = f"payoff: {shown.error.message}; reading again in {shown.pause:.0f} s"
        return Shown(EXIT_OK, None, [said])
    from .payoff_report import lines as report_lines
    from .payoff_report import to_dict

    data = to_dict(shown)
    lines = report_lines(shown)
    if clear:
        lines[:1] = [CLEAR_SCREEN + (lines[0] if lines else "")]
    return Shown(outcomes.verdict(shown.verdict), data, lines)


def bench(result: BenchResult) -> Shown:
    code = outcomes.bench(result.pays_at, [v for _, v in result.verdicts()])
    from .notes import reason_or_none
    from .payoff_report import add_reason

    data = {**result.to_dict(), "summary": bench_summary(result)}
    for d, p in zip(data["points"], result.points, strict=True):  # type: ignore[call-overload]
        add_reason(d, reason_or_none(p.judgement().reason))
    return Shown(code, data, bench_lines(result))


def sweep(
    result: SweepResult, code: int, ignored: tuple[str, ...], plot_error: NotWritable | None
) -> Shown:
    """``code``: the sweep's own exit code; ``ignored``: the serve arguments the sweep replaced;
    ``plot_error``: the picture could not be written (its code wins; the report is kept)."""
    from .sweep import lines, to_dict

    data = to_dict(result)
    data["ignored"] = list(ignored)
    errors = []
    if plot_error is not None:
        data["plot_error"] = plot_error.message
        errors.append(f"vllm-patcher: error: {plot_error.message}")
        code = plot_error.exit_code
    return Shown(code, data, lines(result), stderr=errors)


def sweep_opening(e: SweepOpening) -> list[str]:
    """What the sweep is about to do, for stderr as it starts."""
    ks = ", ".join(map(str, e.ks))
    out = []
    if e.replaced:
        out.append(
            f"{' and '.join(e.replaced)} ignored: its servers listen on 127.0.0.1 and a free port"
        )
    runs = len(e.concurrencies) * e.repeat
    cost = (
        f"on each, {e.repeat} x {e.prompts} prompts at concurrency "
        f"{', '.join(map(str, e.concurrencies))} after a warm-up: "
        f"{(len(e.ks) + 1) * runs} measured runs in all"
    )
    if not e.starts:
        out.append(
            f"{len(e.ks)} running servers to measure (k = {ks}), the baseline a second time at "
            f"the end; {cost}"
        )
    else:
        out.append(
            f"{len(e.ks) + 1} servers to start, one model load each (k = {ks}, then k = 0 "
            f"again: did the host's speed hold?); {cost}; logs in {e.log_dir}"
        )
    return out


def bench_lines(result: BenchResult) -> list[str]:
    """payoff bench's table: a row per concurrency, its reason where unknown, the summary."""
    from ...load.point import MEASURES
    from .notes import reason, span

    out = [
        "concurrency  verdict     per-token (client)  throughput (client)  per-token (/metrics)"
        "  tok/s spec / base    acceptance  drafts"
    ]
    for p in result.points:
        d = p.to_dict()
        series = p.series()
        figures = [span(series[m]) if series[m] else "-" for m in MEASURES]
        out.append(
            f"{p.concurrency:>11}  {d['verdict']:<10}  {figures[0]:>18}  {figures[1]:>19}  "
            f"{figures[2]:>20}  {d['throughput'] or 0:>8.1f} / {d['baseline_throughput'] or 0:<8.1f}"
            f"  {(d['acceptance_rate'] or 0):>9.1%}  {d['drafts']:>6,}"
        )
        why = p.judgement().reason
        if why is not None:
            out.append(f"{'':>13}unknown: {reason(why)}")
    out.append(bench_summary(result))
    if result.repeat == 1:
        out.append(
            "one run per concurrency: its spread is not known (--repeat 3 gives a verdict only "
            "where three runs agree)"
        )
    return out


def bench_summary(result: BenchResult) -> str:
    """One line that says what the rows say, and nothing they do not."""
    rows = result.verdicts()
    paying = result.pays_at
    unknown = [c for c, v in rows if v == UNKNOWN]
    if rows and len(paying) == len(rows):
        return "speculation pays at every concurrency measured"
    if rows and len(unknown) == len(rows):
        return "no verdict at any concurrency measured: unknown at " + _list(unknown)
    above = result.stops_paying_above
    if above is not None:
        said = f"speculation stops paying above concurrency {above}"
    elif paying:
        said = "speculation pays at concurrency " + _list(paying) + " only"
    elif unknown:
        said = "speculation does not pay where a verdict was possible"
    else:
        said = "speculation does not pay at the concurrencies measured"
    if unknown:
        said += "; unknown at concurrency " + _list(unknown) + " (see the row's reason)"
    return said


def _list(levels: list[int]) -> str:
    return ", ".join(str(c) for c in levels)
