"""``payoff sweep``: the user's own ``vllm serve`` at each k, the same load on each, the best k
measured.

For each k (0 first: the same command without ``--speculative-config``, the baseline of every
other k) the server is started in the target interpreter (``serving.server``), measured by the
engine ``payoff bench`` drives too (``load.engine``: a warm-up, then vLLM's own benchmark client at
each concurrency ``repeat`` times between two scrapes of its /metrics), and stopped. Each k's runs are then set against k = 0's at the same concurrency and
judged by ``payoff bench``'s rules (``load.point.Point``: both measures, every repeat in one
class, or ``unknown``). Nothing here is a model: a best k is a measured cell whose verdict is ``pays``.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadSetting, NoDrafts, NoSpeculation, ServerUnreachable, SweepInterrupted
from ..events import (
    BaselineAgain,
    FailedAgain,
    KRun,
    LoadEvent,
    NoBaseline,
    Running,
    RunStarting,
    ServerFailed,
    ServerNext,
    ServerReady,
    ServerStarted,
    ServerStopped,
    SweepEvent,
    SweepOpening,
)
from ..load import engine
from ..load.engine import Measured
from ..load.point import Point, Run
from ..load.repeats import failed_note, failures, merged, noise
from ..payoff import scrape
from ..payoff.analysis import analyse
from ..payoff.judge import MARGIN
from ..payoff.notes import BaselineNotAgain, Note, SpeedMoved
from ..payoff.window import NotOneWindow
from ..serving import server
from ..serving.args import ServeArgs, option_name
from .result import Started, SweepResult

# vllm bench serve's options named so (0.15.1: benchmarks/serve.py): a prefix of both (--tok) is
# ambiguous to its parser, which refuses it; --tokenizer-m is --tokenizer-mode
CLIENT_TOKENIZER = ("--tokenizer", "--tokenizer-mode")

Say = Callable[[SweepEvent], None]


def _measure(
    python: str, server: engine.Server, k: int, plan: Plan, tmp: str, tell: Say, started: Started
) -> None:
    """The engine's warm-up and runs on one server, kept in ``started``."""
    loading = time.monotonic()

    def said(event: LoadEvent) -> None:
        if isinstance(event, RunStarting):
            tell(KRun(k, event.c, event.run, event.repeat))

    load = engine.Load(python, plan.concurrencies, plan.repeat, plan.prompts, plan.dataset, tmp)
    got = engine.measure(load, [server], said)
    started.runs = got.runs[server.name]
    started.under_load_s = time.monotonic() - loading


def _served_k(started: Started) -> set[int]:
    """The k the server really drafted with, from the runs that made drafts (their per-position
    series); {0} when none did. A concurrency with no drafts is the cell's own matter
    (``no_drafts``), not the server's."""
    windows = [m.window for runs in started.runs.values() for m in runs]
    return {w.k for w in windows if w.spec and w.drafts > 0} or {0}


def _serve_one(
    python: str, args: ServeArgs, k: int, plan: Plan, tmp: str, say: Say, name: str = ""
) -> Started:
    log = plan.log_dir / f"{name or f'k{k}'}.log"
    started = Started(k, log)
    run_args = ServeArgs(args.model, tuple(args.with_k(k)))
    try:
        with server.running(
            python,
            run_args,
            log,
            plan.ready_timeout_s,
            on_start=lambda pid: _started(started, pid, say),
        ) as srv:
            started.ready_s = srv.ready_s
            say(ServerReady(k, srv.ready_s, srv.pid))
            srv.follow()  # what it started so far, stopped with it even outside its group
            try:
                one = engine.Server(name or f"k{k}", srv.url, plan.client_args(args),
                                    args.server_key())  # fmt: skip
                _measure(python, one, k, plan, tmp, say, started)
            except (ServerUnreachable, NoDrafts, NoSpeculation, NotOneWindow) as exc:
                how, code = srv.exit_note()
                # said once it is stopped: "still running" would read as left behind
                state = "was still running; it is stopped" if code is None else how
                started.failure = server.StartFailure(
                    f"failed under the load (the server {state}): {exc.message}",
                    code,
                    log,
                    server.log_tail(log),
                )
            else:
                how, code = srv.exit_note()
                if code is not None:  # what answered was not our server, or not all along
                    started.failure = server.StartFailure(
                        f"the server {how} during the load: what answered was not it",
                        code,
                        log,
                        server.log_tail(log),
                    )
        say(ServerStopped(k))
    except server.ServerDidNotStart as exc:
        started.failure = exc.failure
    served = _served_k(started)
    if started.failure is None and served != {k}:
        said = ", ".join(map(str, sorted(served)))
        why = (
            "it made no drafts under the load"
            + failed_note([m.result for rs in started.runs.values() for m in rs])
            if served == {0}
            else f"it served k = {said}, not {k}: a speculative config reached it from elsewhere "
            "(--config FILE, -sc, --speculative_config, --spec-*): give it as "
            "--speculative-config only"
        )
        started.failure = server.StartFailure(why, None, log, ())
    if started.failure is not None:
        started.runs.clear()  # nothing of it is judged
        say(ServerFailed(k, started.failure.reason, log))
    return started


def _running_one(
    python: str, url: str, k: int, plan: Plan, tmp: str, say: Say, name: str = ""
) -> Started:
    """A server the user runs for this k (``--url K=URL``): measured, never started or stopped,
    and checked to serve that k."""
    started = Started(k, None)
    say(Running(k, url))
    try:
        _measure(python, engine.Server(name or f"k{k}", url, plan.client_extra), k, plan, tmp, say,
                 started)  # fmt: skip
    except (ServerUnreachable, NoDrafts, NoSpeculation, NotOneWindow) as exc:
        started.runs.clear()
        started.failure = server.StartFailure(
            f"failed under the load: {exc.message}", None, None, ()
        )
        say(ServerFailed(k, started.failure.reason))
        return started
    served = _served_k(started)
    if served != {k} and name:  # the baseline measured again: its failure, the report kept
        said = ", ".join(str(x) for x in sorted(served))
        started.runs.clear()
        started.failure = server.StartFailure(
            f"{url} served k = {said} under the load, no longer {k}", None, None, ()
        )
        say(FailedAgain(k, started.failure.reason))
    elif served != {k}:
        said = ", ".join(str(x) for x in sorted(served))
        raise BadSetting(
            f"--url {k}={url} served k = {said} under the load (its drafts' positions): give each "
            "URL with the num_speculative_tokens its server runs (0: no --speculative-config)"
        )
    return started


def _started(started: Started, pid: int, say: Say) -> None:
    started.pid = pid
    say(ServerStarted(started.k, pid))


@dataclass(frozen=True)
class Plan:
    ks: list[int]
    concurrencies: list[int]
    repeat: int
    prompts: int
    dataset: str
    client_extra: tuple[str, ...]
    log_dir_given: Path | None
    ready_timeout_s: float
    urls: dict[int, str] = field(default_factory=dict)  # --url K=URL: running servers
    log_dir: Path = Path()  # made by ``prepare``, once nothing is left to refuse

    def prepare(self) -> Plan:
        """The log folder made (``--log-dir``, or a new one under the system's temp); none when
        the sweep measures running servers (``--url``) and no ``--log-dir`` was given: it starts
        no server, so it has no log to keep. A plan prepared already is returned as it is."""
        if self.log_dir != Path() or (self.log_dir_given is None and self.urls):
            return self
        if self.log_dir_given is None:
            made = Path(tempfile.mkdtemp(prefix="vllm-patcher-sweep-"))
        else:
            made = self.log_dir_given
            try:
                made.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BadSetting(f"--log-dir {made}: {exc.strerror or exc}") from None
        return dataclasses.replace(self, log_dir=made)

    def client_args(self, args: ServeArgs) -> tuple[str, ...]:
        """The client's own arguments, with the served model's tokenizer unless given."""
        extra = self.client_extra
        # read as the client's parser reads it (both spellings, an unambiguous prefix)
        if not any(option_name(a, CLIENT_TOKENIZER)[0] == "--tokenizer" for a in extra):
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
    urls: dict[int, str] | None = None,
) -> Plan:
    """The sweep's plan, or the sweep's own refusal (``--k``, ``--num-prompts``, ``--client-args``,
    ``--log-dir``); ``concurrencies``, ``repeat`` and ``ready_timeout_s`` come checked by their
    options (``cli/options.py``)."""
    if not ks or any(k < 0 for k in ks):
        raise BadSetting("--k takes draft lengths 0 and up, e.g. 0,1,2,3")
    if 0 not in ks:
        raise BadSetting("--k must include 0: the same server without speculation is the baseline")
    if max(ks) > scrape.MAX_K:
        raise BadSetting(
            f"--k {max(ks)}: the acceptance per position is read for positions 0 to "
            f"{scrape.MAX_K - 1}, so k goes up to {scrape.MAX_K}"
        )
    if len(ks) < 2:
        raise BadSetting("--k needs 0 and at least one draft length, e.g. 0,1,2,3")
    if prompts < 1:
        raise BadSetting(f"--num-prompts {prompts}: give 1 or more")
    engine.refuse_set_by_the_load(client_extra, "--client-args {}", "payoff sweep")
    if log_dir is not None and log_dir.exists() and not log_dir.is_dir():
        raise BadSetting(f"--log-dir {log_dir} is not a folder")
    return Plan(
        sorted(set(ks)),
        sorted(set(concurrencies)),
        repeat,
        prompts,
        dataset,
        client_extra,
        log_dir,
        ready_timeout_s,
        dict(urls or {}),
    )


def check(python: str, args: ServeArgs | None, p: Plan, vllm_version: str | None = None) -> None:
    """Everything that can be refused before a model is loaded: a k above 0 with no drafter,
    an EAGLE-3 drafter with pipeline stages the release cannot carry captures across (on
    ``vllm_version``), and the client's arguments (parsed by vllm bench serve's own parser)."""
    if args is not None and any(k for k in p.ks):
        args.with_k(1)  # raises when there is no --speculative-config to write k into
        if vllm_version is not None:
            from ..doctor.checks import serve_pipeline_refusal

            refused = serve_pipeline_refusal(args, vllm_version)
            if refused is not None:
                raise BadSetting(refused)
    engine.check_client(python, p.dataset, p.client_extra if args is None else p.client_args(args))


def run(
    python: str,
    args: ServeArgs | None,
    given: Plan,
    say: Say | None = None,
    vllm_version: str | None = None,
) -> SweepResult:
    """Check ``given`` (``check``), make its log folder, then start each k's server from
    ``args`` (or, with ``urls``, measure the user's running ones) and judge every cell; one client
    session holds the checks and every load. Ctrl-C (SIGTERM, SIGHUP too, under
    ``serving.server.signals_interrupt``) is ``SweepInterrupted`` once every server is stopped."""
    tell: Say = say or (lambda _: None)
    p = given
    try:
        with engine.session(python):
            check(python, args, p, vllm_version)
            p = p.prepare()
            replaced = () if args is None else tuple(args.replaced)
            tell(SweepOpening(args is not None, replaced, tuple(p.ks), tuple(p.concurrencies),
                              p.repeat, p.prompts, p.log_dir))  # fmt: skip
            servers, again = _each_server(python, args, p, tell)
        return _judged(p, servers, again)
    except KeyboardInterrupt:
        logs = f" (logs in {p.log_dir})" if p.log_dir != Path() else ""
        raise SweepInterrupted(
            f"interrupted; every server this sweep started is stopped{logs}"
        ) from None


def _each_server(
    python: str, args: ServeArgs | None, p: Plan, tell: Say
) -> tuple[dict[int, Started], Started | None]:
    """Each k's server in turn, then k = 0 again (when it and another k were measured)."""
    started_at = time.monotonic()
    servers: dict[int, Started] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-sweep-") as tmp:
        total = len(p.ks) + 1  # each k, then k = 0 again
        what = "measuring" if args is None else "starting"
        for i, k in enumerate(p.ks):
            elapsed = time.monotonic() - started_at
            tell(
                ServerNext(k, what, i + 1, total, elapsed, elapsed / i * (total - i) if i else None)
            )
            if args is None:
                servers[k] = _running_one(python, p.urls[k], k, p, tmp, tell)
                servers[k].url = p.urls[k]
            else:
                servers[k] = _serve_one(python, args, k, p, tmp, tell)
            if k == 0 and servers[0].failure is not None:
                tell(NoBaseline())
                break
        again = None
        if servers[0].failure is None and any(s.failure is None for s in servers.values() if s.k):
            tell(BaselineAgain(what, total, time.monotonic() - started_at))
            if args is None:
                again = _running_one(python, p.urls[0], 0, p, tmp, tell, "k0-again")
                again.url = p.urls[0]
            else:
                again = _serve_one(python, args, 0, p, tmp, tell, "k0-again")
    return servers, again


def _judged(p: Plan, servers: dict[int, Started], again: Started | None) -> SweepResult:
    """Each k's cells set against k = 0's runs at the same concurrency."""
    out = SweepResult(p.ks, p.concurrencies, p.repeat, p.prompts, servers, p.log_dir, again=again)
    base = servers[0]
    for k in p.ks:
        if k == 0 or k not in servers or servers[k].failure is not None or base.failure:
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
            noise, drift = baseline_drift(base.runs.get(c, []), again, c, p.prompts)
            out.cells[(k, c)] = Point(c, runs, analyse(window), p.prompts, noise, drift)
    return out


def baseline_drift(
    first: list[Measured], again: Started | None, c: int, prompts: int = 0
) -> tuple[float, Note | None]:
    """The baseline's own spread at concurrency ``c`` over both its servers' runs (the
    break-even band is at least this wide), and why there is no verdict when its two
    measurements, at the sweep's start and end, disagree by more than the margin (the host's
    speed moved: a k measured in between is set against a speed it may not have had), or the
    second cannot stand for the first (failed requests, another model, a restart, no figure)."""
    if again is None or again.failure is not None or not again.runs.get(c):
        failed_to_start = again is not None and again.failure is not None
        return 0.0, BaselineNotAgain(why="failed" if failed_to_start else "not-run")
    end = again.runs[c]
    failed = failures([m.result for m in end], prompts)[0]
    if failed:
        return 0.0, BaselineNotAgain(why="failed-requests", failed=failed)
    models = {m.window.model for m in first + end if m.window.model}
    if len(models) > 1:
        return 0.0, BaselineNotAgain(why="other-model", models=sorted(models))
    if any(m.window.reset for m in end):
        return 0.0, BaselineNotAgain(why="restarted")
    for name, unit, key in (("per-token time", "ms", "mean_tpot_ms"),
                            ("throughput", "tok/s", "output_throughput")):  # fmt: skip
        a = [v for m in first if (v := _num(m.result.get(key)))]
        b = [v for m in end if (v := _num(m.result.get(key)))]
        if len(a) != len(first) or len(b) != len(end):
            return 0.0, BaselineNotAgain(why="no-figure", measure=name)
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        if abs(mb / ma - 1) > MARGIN:
            return 0.0, SpeedMoved(measure=name, unit=unit, start=ma, end=mb, margin=MARGIN)
    return noise([m.result for m in first + end]), None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None
