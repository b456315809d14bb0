"""``payoff sweep``: the user's own ``vllm serve`` at each k, the same load on each, the best k
measured.

For each k (0 first: the same command without ``--speculative-config``, the baseline of every
other k) the server is started in the target interpreter (``serving.server``), warmed up, loaded
with vLLM's own benchmark client at each concurrency ``repeat`` times between two scrapes of its
/metrics, and stopped. Each k's runs are then set against k = 0's at the same concurrency and
judged by ``payoff bench``'s rules (``bench.Point``: both measures, every repeat in one class, or
``unknown``). Nothing here is a model: a best k is a measured cell whose verdict is ``pays``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BadSetting
from ..serving import server
from ..serving.args import ServeArgs
from . import scrape
from .analysis import analyse
from .bench import Point, Run, client, merged
from .judge import PAYS, UNKNOWN, Judgement, span
from .window import Window, between

WARM_UP_PROMPTS = 4  # the first requests of a new server pay one-off costs: not measured


@dataclass
class Measured:
    """One run of the load on one server: the client's result and the /metrics window."""

    result: dict[str, Any]
    window: Window


@dataclass
class Started:
    k: int
    log: Path
    pid: int | None = None  # the server's process group
    ready_s: float | None = None
    load_s: float = 0.0  # warm-up and measured loads, scrapes included
    failure: server.StartFailure | None = None
    runs: dict[int, list[Measured]] = field(default_factory=dict)  # by concurrency

    def to_dict(self) -> dict[str, object]:
        f = self.failure
        return {
            "k": self.k,
            "log": str(self.log),
            "pid": self.pid,
            "load_s": round(self.load_s, 1),
            "ready_s": None if self.ready_s is None else round(self.ready_s, 1),
            "failure": None
            if f is None
            else {
                "reason": f.reason,
                "returncode": f.returncode,
                "signal": f.signal_name,
                "log_tail": list(f.tail),
            },
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

    def best(self, c: int) -> tuple[int | None, Judgement]:
        """The best k measured at concurrency ``c``: the paying cell with the highest speedup
        (0 when every k was judged and none pays; None when a cell is unknown or missing)."""
        points = {k: p for (k, cc), p in self.cells.items() if cc == c}
        judged = {k: p.judgement() for k, p in points.items()}
        paying = {k: p for k, p in points.items() if judged[k].verdict == PAYS}
        if paying:
            k = max(paying, key=lambda kk: paying[kk].speedup or 0.0)
            return k, judged[k]
        unknown = [k for k, j in judged.items() if j.verdict == UNKNOWN]
        missing = [k for k in self.ks if k and k not in points]
        if unknown or missing:
            said = ", ".join(f"k = {k}" for k in sorted(unknown + missing))
            return None, Judgement(UNKNOWN, f"no k pays for certain: {said} unknown or not run")
        top = max(points, key=lambda kk: points[kk].speedup or 0.0)
        return 0, judged[top]  # every k judged, none pays: serve without speculation

    @property
    def no_k_pays_above(self) -> int | None:
        """The highest concurrency at which some k pays, when every higher one was judged and
        none pays there."""
        best = {c: self.best(c)[0] for c in self.concurrencies}
        paying = [c for c in self.concurrencies if best[c]]
        if not paying or paying[-1] == self.concurrencies[-1]:
            return None
        above = [c for c in self.concurrencies if c > paying[-1]]
        return paying[-1] if all(best[c] == 0 for c in above) else None

    def verdict(self) -> Judgement:
        """From the best measured cell: ``pays`` when a cell pays, else the class every cell
        shares, else ``unknown``."""
        bests = [self.best(c) for c in self.concurrencies]
        if any(k for k, _ in bests):
            return Judgement(PAYS)
        if any(k is None for k, _ in bests) or not self.cells:
            return Judgement(UNKNOWN, "no cell pays, and some are unknown or were not run")
        classes = {p.judgement().verdict for p in self.cells.values()}
        return Judgement(classes.pop()) if len(classes) == 1 else Judgement(UNKNOWN, "mixed")

    def to_dict(self) -> dict[str, object]:
        cells = []
        for (k, _), p in sorted(self.cells.items()):
            d = p.to_dict()
            d["k"] = k
            d["tokens_per_step"] = p.analysis.to_dict().get("tokens_per_step")
            cells.append(d)
        judged = self.verdict()
        return {
            "verdict": judged.verdict,
            "unknown_reason": judged.reason,
            "ks": self.ks,
            "concurrencies": self.concurrencies,
            "repeat": self.repeat,
            "num_prompts": self.prompts,
            "cells": cells,
            "baseline": {str(c): _baseline(self.servers.get(0), c) for c in self.concurrencies},
            "best_k": {str(c): self.best(c)[0] for c in self.concurrencies},
            "no_k_pays_above": self.no_k_pays_above,
            "servers": [s.to_dict() for _, s in sorted(self.servers.items())],
            "no_drafts": [{"k": k, "concurrency": c} for k, c in self.no_drafts],
            "log_dir": str(self.log_dir),
        }


def _baseline(started: Started | None, c: int) -> dict[str, object] | None:
    if started is None or not started.runs.get(c):
        return None
    runs = started.runs[c]
    tpot = [r.result.get("mean_tpot_ms") for r in runs]
    tput = [r.result.get("output_throughput") for r in runs]
    return {
        "tpot_ms": [t for t in tpot if isinstance(t, int | float)],
        "throughput": [t for t in tput if isinstance(t, int | float)],
    }


def _load_argv(
    url: str, c: int, prompts: int, dataset: str, tmp: str, name: str, extra: tuple[str, ...]
) -> list[str]:
    return [
        "--base-url", url,
        "--dataset-name", dataset,
        "--num-prompts", str(prompts),
        "--max-concurrency", str(c),
        "--request-rate", "inf",
        "--ignore-eos",
        "--save-result",
        "--result-dir", tmp,
        "--result-filename", name,
        *extra,
    ]  # fmt: skip


def _serve_one(
    python: str,
    args: ServeArgs,
    k: int,
    plan: Plan,
    tmp: str,
    say: Callable[[str], None],
) -> Started:
    started = Started(k, plan.log_dir / f"k{k}.log")
    run_args = ServeArgs(args.model, tuple(args.with_k(k)))
    try:
        with server.running(
            python,
            run_args,
            started.log,
            plan.ready_timeout_s,
            on_start=lambda pid: _started(started, pid, say),
        ) as srv:
            started.ready_s = srv.ready_s
            loading = time.monotonic()
            say(f"k = {k}: ready in {srv.ready_s:.0f} s (pid {srv.pid}); warming up")
            client(
                python,
                _load_argv(
                    srv.url, max(plan.concurrencies), WARM_UP_PROMPTS, plan.dataset, tmp,
                    f"warm-{k}.json", plan.client_args(args),
                ),
            )  # fmt: skip
            for c in plan.concurrencies:
                for r in range(plan.repeat):
                    say(f"k = {k}: concurrency {c}, run {r + 1} of {plan.repeat}")
                    before = scrape.fetch(srv.url)
                    result = client(
                        python,
                        _load_argv(
                            srv.url, c, plan.prompts, plan.dataset, tmp, f"k{k}-c{c}-r{r}.json",
                            plan.client_args(args),
                        ),
                    )  # fmt: skip
                    window = between(before, scrape.fetch(srv.url))
                    started.runs.setdefault(c, []).append(Measured(result, window))
            started.load_s = time.monotonic() - loading
    except server.ServerDidNotStart as exc:
        started.failure = exc.failure
        say(f"k = {k}: {exc.failure.reason}; its log: {started.log} (the sweep goes on)")
    return started


def _started(started: Started, pid: int, say: Callable[[str], None]) -> None:
    started.pid = pid
    say(f"k = {started.k}: server started (process group {pid}), waiting until it is ready")


@dataclass(frozen=True)
class Plan:
    ks: list[int]
    concurrencies: list[int]
    repeat: int
    prompts: int
    dataset: str
    client_extra: tuple[str, ...]
    log_dir: Path
    ready_timeout_s: float

    def client_args(self, args: ServeArgs) -> tuple[str, ...]:
        """The client's own arguments, with the served model's tokenizer unless given."""
        extra = self.client_extra
        if not any(a == "--tokenizer" or a.startswith("--tokenizer=") for a in extra):
            extra = ("--tokenizer", args.tokenizer or args.model, *extra)
        return extra


def plan(
    ks: list[int],
    concurrencies: list[int],
    repeat: int,
    prompts: int,
    dataset: str,
    client_extra: tuple[str, ...],
    log_dir: Path | None,
    ready_timeout_s: float,
) -> Plan:
    if not ks or any(k < 0 for k in ks):
        raise BadSetting("--k takes draft lengths 0 and up, e.g. 0,1,2,3")
    if 0 not in ks:
        raise BadSetting("--k must include 0: the same server without speculation is the baseline")
    if len(ks) < 2:
        raise BadSetting("--k needs 0 and at least one draft length, e.g. 0,1,2,3")
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise BadSetting("--concurrency takes positive integers, e.g. 1,4,16")
    if repeat < 1:
        raise BadSetting(f"--repeat {repeat}: give 1 or more runs per cell")
    if prompts < 1:
        raise BadSetting(f"--num-prompts {prompts}: give 1 or more")
    if ready_timeout_s <= 0:
        raise BadSetting("--ready-timeout takes seconds above 0")
    if log_dir is None:
        log_dir = Path(tempfile.mkdtemp(prefix="vllm-patcher-sweep-"))
    else:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadSetting(f"--log-dir {log_dir}: {exc.strerror or exc}") from None
    return Plan(
        sorted(set(ks)),
        sorted(set(concurrencies)),
        repeat,
        prompts,
        dataset,
        client_extra,
        log_dir,
        ready_timeout_s,
    )


def run(
    python: str, args: ServeArgs, p: Plan, say: Callable[[str], None] | None = None
) -> SweepResult:
    if any(k for k in p.ks) and args.speculative is None:
        args.with_k(1)  # raises: a k above 0 needs the user's --speculative-config
    tell = say or (lambda _: None)
    started_at = time.monotonic()
    servers: dict[int, Started] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-sweep-") as tmp:
        for i, k in enumerate(p.ks):
            elapsed = time.monotonic() - started_at
            rest = f", about {elapsed / i * (len(p.ks) - i):.0f} s to go" if i else ""
            tell(f"k = {k}: starting server {i + 1} of {len(p.ks)} ({elapsed:.0f} s so far{rest})")
            servers[k] = _serve_one(python, args, k, p, tmp, tell)
    out = SweepResult(p.ks, p.concurrencies, p.repeat, p.prompts, servers, p.log_dir)
    base = servers[0]
    for k in p.ks:
        if k == 0 or servers[k].failure is not None or base.failure is not None:
            continue
        for c in p.concurrencies:
            spec_runs, base_runs = servers[k].runs.get(c, []), base.runs.get(c, [])
            runs = [
                Run(s.result, b.result, s.window, b.window)
                for s, b in zip(spec_runs, base_runs, strict=False)
            ]
            if not runs:
                continue
            window = merged([r.window for r in runs])
            if not window.spec or window.drafts <= 0:
                out.no_drafts.append((k, c))  # judged as not run: nothing to say of it
                continue
            out.cells[(k, c)] = Point(c, runs, analyse(window), p.prompts)
    return out


def lines(result: SweepResult) -> list[str]:
    out = [
        "   k  concurrency  per-token ms  tok/s    speedup (per-token)  throughput ratio  "
        "tokens/step  acceptance by position  verdict"
    ]
    base = result.servers.get(0)
    for c in result.concurrencies:
        b = _baseline(base, c)
        if b is not None:
            out.append(
                f"{0:>4}  {c:>11}  {_spread_ms(b['tpot_ms']):>12}  "  # type: ignore[arg-type]
                f"{_spread_tput(b['throughput']):>7}  {'-':>19}  {'-':>16}  {'1.00':>11}  "  # type: ignore[arg-type]
                f"{'-':<22}  baseline"
            )
        for k in result.ks:
            point = result.cells.get((k, c))
            if k == 0 or point is None:
                continue
            d = point.to_dict()
            series = point.series()
            tps = point.analysis.tokens_per_step
            out.append(
                f"{k:>4}  {c:>11}  {_ms(d['tpot_ms']):>12}  {_tput(d['throughput']):>7}  "
                f"{_span(series, 0):>19}  {_span(series, 1):>16}  "
                f"{'-' if tps is None else f'{tps:.2f}':>11}  "
                f"{' '.join(f'{v:.0%}' for v in point.analysis.prefix):<22}  {d['verdict']}"
            )
            if d["unknown_reason"]:
                out.append(f"{'':>19}unknown: {d['unknown_reason']}")
    for k, c in result.no_drafts:
        out.append(f"k = {k}, concurrency {c}: the server made no drafts under the load")
    for k, s in sorted(result.servers.items()):
        if s.failure is not None:
            sig = f", {s.failure.signal_name}" if s.failure.signal_name else ""
            out.append(f"k = {k}: did not start: {s.failure.reason}{sig}; its log: {s.log}")
            out += [f"    {line}" for line in s.failure.tail[-5:]]
    ready = ", ".join(
        f"k = {k} {s.ready_s:.0f} s" for k, s in sorted(result.servers.items()) if s.ready_s
    )
    if ready:
        out.append(f"ready after: {ready} (logs in {result.log_dir})")
    for c in result.concurrencies:
        best, judged = result.best(c)
        if best:
            cell = result.cells[(best, c)]
            out.append(
                f"concurrency {c}: best k = {best} ({cell.speedup or 0:.2f}x per-token, measured):"
                f" set num_speculative_tokens to {best} for traffic like this"
            )
        elif best == 0:
            out.append(f"concurrency {c}: no k pays ({judged.verdict} at best): serve without it")
        else:
            out.append(f"concurrency {c}: unknown: {judged.reason}")
    above = result.no_k_pays_above
    if above is not None:
        out.append(f"no k pays above concurrency {above}")
    judged = result.verdict()
    out.append(f"verdict: {judged.verdict}" + (f" ({judged.reason})" if judged.reason else ""))
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
