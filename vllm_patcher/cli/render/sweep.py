"""``payoff sweep``'s text: the table of every cell measured, each server that failed, the best k
per concurrency and the verdict, from the ``SweepResult`` its JSON report is made of."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...payoff.analysis import SMALL_SAMPLE
from ...sweep.result import baseline_runs, small_sample
from .notes import reason, reason_or_none, span
from .payoff_report import add_reason

if TYPE_CHECKING:
    from ...load.point import Point
    from ...sweep.result import SweepResult


def _cell_lines(k: int, c: int, point: Point) -> list[str]:
    """One cell's row, and why it is unknown or too small to choose k by."""
    d = point.to_dict()
    series = point.series()
    tps = point.analysis.tokens_per_step
    out = [
        f"{k:>4}  {c:>11}  {_ms(d['tpot_ms']):>12}  {_tput(d['throughput']):>7}  "
        f"{_span(series, 0):>27}  {_span(series, 2):>20}  {_span(series, 1):>10}  "
        f"{'-' if tps is None else f'{tps:.2f}':>11}  "
        f"{' '.join(f'{v:.0%}' for v in point.analysis.prefix):<22}  {d['verdict']}"
    ]
    why = point.judgement().reason
    if why is not None:
        out.append(f"{'':>19}unknown: {reason(why)}")
    if small_sample(point):
        out.append(
            f"{'':>19}only {int(point.analysis.drafts)} drafts: under {SMALL_SAMPLE}, "
            "never the best k"
        )
    return out


def _baseline_row(c: int, runs: dict[str, object] | None, label: str) -> list[str]:
    if runs is None:
        return []
    return [
        f"{0:>4}  {c:>11}  {_spread_ms(runs['tpot_ms']):>12}  "  # type: ignore[arg-type]
        f"{_spread_tput(runs['throughput']):>7}  {'-':>27}  {'-':>20}  {'-':>10}  "  # type: ignore[arg-type]
        f"{'1.00':>11}  {'-':<22}  {label}"
    ]


def _table(result: SweepResult) -> list[str]:
    out = [
        "   k  concurrency  per-token ms  tok/s    speedup: per-token (client)  per-token "
        "(/metrics)  throughput  tokens/step  acceptance by position  verdict"
    ]
    for c in result.concurrencies:
        out += _baseline_row(c, baseline_runs(result.servers.get(0), c), "baseline")
        out += _baseline_row(c, baseline_runs(result.again, c), "baseline again, after every k")
        for k in result.ks:
            point = result.cells.get((k, c))
            if k and point is not None:
                out += _cell_lines(k, c, point)
    return out


def lines(result: SweepResult) -> list[str]:
    out = _table(result)
    for k, c in result.no_drafts:
        out.append(f"k = {k}, concurrency {c}: the server made no drafts under the load")
    again = [("k = 0 again (end of sweep)", result.again)] if result.again is not None else []
    for name, s in [*((f"k = {k}", s) for k, s in sorted(result.servers.items())), *again]:
        if s.failure is not None:
            sig = s.failure.signal_name or ""
            sig = f", {sig}" if sig and sig not in s.failure.reason else ""
            where = f"its log: {s.log}" if s.log is not None else f"the server: {s.url}"
            out.append(f"{name}: not measured: {s.failure.reason}{sig}; {where}")
            out += [f"    {line}" for line in s.failure.tail[-5:]]
    if (
        0 in result.ks
        and 0 not in result.servers
        or (result.servers.get(0) and result.servers[0].failure is not None)
    ):
        out.append("the baseline (k = 0) was not measured: no other k was started or judged")
    ready = ", ".join(
        f"k = {k} {s.ready_s:.0f} s" for k, s in sorted(result.servers.items()) if s.ready_s
    )
    if ready:
        out.append(f"ready after: {ready} (logs in {result.log_dir})")
    if result.repeat == 1 and result.cells:
        out.append(
            "one run per cell: its spread is not known (--repeat 2, the default, gives a verdict "
            "only where both runs agree)"
        )
    for c in result.concurrencies:
        best, judged = result.best(c)
        if best:
            cell = result.cells[(best, c)]
            out.append(
                f"concurrency {c}: best k = {best} ({_figure(cell)}, measured):"
                f" set num_speculative_tokens to {best} for traffic like this"
            )
        elif best == 0:
            top = max(
                (k for k in result.ks if (k, c) in result.cells),
                key=lambda k: result.cells[(k, c)].speedup or 0.0,
            )
            out.append(
                f"concurrency {c}: no k pays (the best, k = {top}: "
                f"{_figure(result.cells[(top, c)])}, {judged.verdict}): serve without "
                "speculation for traffic like this"
            )
        else:
            out.append(
                f"concurrency {c}: no best k: {reason(judged.reason) if judged.reason else ''}"
            )
    above = result.no_k_pays_above
    if above is not None:
        out.append(f"no k pays above concurrency {above}")
    judged = result.verdict()
    said = f" ({reason(judged.reason)})" if judged.reason else ""
    if result.repeat == 1 and judged.verdict != "unknown":
        said += (
            " from one run per cell: the run-to-run noise it could not see was 5.1 against 9.1 ms "
            "per token for one server in two runs on an H200"
        )
    out.append(f"verdict: {judged.verdict}{said}")
    return out


def _span(series: dict[str, list[float]], i: int) -> str:
    values = list(series.values())[i]
    return span(values) if values else "-"


def _ms(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def _tput(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def _spread_ms(values: list[float]) -> str:
    return _ms(sum(values) / len(values)) if values else "-"


def _spread_tput(values: list[float]) -> str:
    return _tput(sum(values) / len(values)) if values else "-"


def _figure(point: Point) -> str:
    """The cell's speedup as the report names it: per-token (the client's), else throughput."""
    if point.speedup is not None:
        return f"{point.speedup:.2f}x per-token"
    ratio = point.to_dict()["throughput_ratio"]
    return f"{ratio:.2f}x throughput" if isinstance(ratio, int | float) else "no client figure"


def to_dict(result: SweepResult) -> dict[str, object]:
    """The sweep's JSON: its figures, each unknown cell's reason and the verdict's in words."""
    data = result.to_dict()
    cells = [p for _, p in sorted(result.cells.items())]
    for d, p in zip(data["cells"], cells, strict=True):  # type: ignore[call-overload]
        add_reason(d, reason_or_none(p.judgement().reason))
    add_reason(data, reason_or_none(result.verdict().reason))
    return data
