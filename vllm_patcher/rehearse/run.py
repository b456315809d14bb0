"""One rehearsal: the user's ``vllm serve`` with ``--load-format dummy``, through ``serving``.

The server is started in the target interpreter on 127.0.0.1 and a free port, in its own process
group (``serving.server.running``: stopped on every way out, Ctrl-C included). While it loads, its
log's new lines are read for the steps it reached; once healthy it is asked a few short
completions, then its ``/metrics`` is read for the speculative-decoding counters. A failure is
named from the log by ``failures``. Nothing here judges acceptance: random weights draft noise.
"""

from __future__ import annotations

import contextlib
import getpass
import http.client
import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from .. import fileops
from ..doctor import faults
from ..errors import BadSetting, NoVllmMetrics, ServerUnreachable
from ..events import PhaseReached, RehearsalReady, RehearsalStarted, RehearseEvent
from ..payoff import scrape
from ..serving import server
from ..serving.args import SPEC, ServeArgs, option_name
from . import failures
from .phases import LABEL, Progress, new_progress

LOAD_FORMAT = "--load-format"
PROMPT = "The capital of France is"
# the server's environment: a signal that kills a vLLM process names itself and its frames in
# the log (faulthandler), which is how the failure table tells SIGILL from other deaths
ENV = {"PYTHONFAULTHANDLER": "1"}
COMPLETION_TIMEOUT_S = 120.0  # a short completion on a ready server; a hang is a failure
AFTER_FAILURE_S = 20.0  # a request failed: how long the log may take to name why


@dataclass(frozen=True)
class Plan:
    args: ServeArgs  # what the server is started with (dummy weights included)
    ignored: tuple[str, ...]  # the user's options replaced, as they gave them
    real_drafter: bool
    ready_timeout_s: float
    completions: int = 3
    max_tokens: int = 16
    log_given: Path | None = None
    apply_command: str = "vllm-patcher apply"  # as the user pastes it for this environment
    known_faults: tuple[str, ...] = ()  # keys of the known failures it walks into (known_faults())

    @property
    def speculative(self) -> bool:
        return self.args.speculative is not None


def _is_load_format(arg: str) -> bool:
    """``--load-format`` in any spelling vLLM's parser takes (``_`` for ``-``, a prefix)."""
    return option_name(arg, (LOAD_FORMAT,), shortest=len("--load-f"))[0] == LOAD_FORMAT


def plan(
    args: ServeArgs,
    real_drafter: bool,
    draft_load_config: bool,
    ready_timeout_s: float,
    log: Path | None = None,
    apply_command: str = "vllm-patcher apply",
) -> Plan:
    """The server's arguments: the user's, their ``--load-format`` replaced by ``dummy``; with
    ``real_drafter`` the drafter's own load config reads its checkpoint (``draft_load_config``:
    whether the release has it); ``ready_timeout_s``: finite and above 0, as its option checks
    (``cli/options.py``)."""
    if log is not None and log.is_dir():
        raise BadSetting(f"--log {log} is a folder; give a file name")
    rest: list[str] = []
    ignored = [
        f"{name} (the server listens on 127.0.0.1 and a free port)" for name in args.replaced
    ]
    given = list(args.rest)
    while given:
        arg = given.pop(0)
        if not _is_load_format(arg):
            rest.append(arg)
            continue
        value = arg.split("=", 1)[1] if "=" in arg else (given.pop(0) if given else "")
        ignored.append(f"{LOAD_FORMAT} {value} (rehearse reads no checkpoint: dummy)")
    rest += [LOAD_FORMAT, "dummy"]
    spec = args.speculative
    if real_drafter:
        if spec is None:
            raise BadSetting("--real-drafter needs a drafter: give --speculative-config after --")
        if not draft_load_config:
            raise BadSetting(
                "--real-drafter: this vLLM release has no SpeculativeConfig.draft_load_config "
                "(from 0.17.1), so its drafter loads with the target's dummy weights; `vllm-patcher "
                "doctor --model M --drafter D` checks the drafter's weight names and shapes from "
                "its safetensors headers instead: drop --real-drafter"
            )
        spec = {**spec, "draft_load_config": {"load_format": "auto"}}
    if spec is not None:
        rest += [SPEC, json.dumps(spec)]
    served = ServeArgs(
        args.model, tuple(rest), spec, args.served_name, args.tokenizer, api_key=args.api_key
    )
    return Plan(
        served,
        tuple(ignored),
        real_drafter,
        ready_timeout_s,
        log_given=log,
        apply_command=apply_command,
    )


def known_faults(p: Plan, vllm_version: str) -> list[faults.KnownFailure]:
    """The known failures (``doctor.faults``) this rehearsal walks into: the target's class as its
    config.json names it (a local folder; a hub id is not looked up), on this release, with no
    serve flag or environment that avoids them."""
    try:
        config = json.loads((Path(p.args.model) / "config.json").read_text())
        archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    except (OSError, ValueError, AttributeError):
        return []
    spec = p.args.speculative or {}
    if str(spec.get("method", "")).lower() != "eagle3" or faults.avoided(p.args.rest, os.environ):
        return []  # the fault is the EAGLE-3 drafter's graphs
    try:
        return [f for arch in archs for f in faults.known(arch, vllm_version)]
    except InvalidVersion:
        return []


def has_draft_load_config(site_packages: Path) -> bool:
    """Whether the release's SpeculativeConfig has ``draft_load_config`` (read, not imported)."""
    try:
        text = (site_packages / "vllm" / "config" / "speculative.py").read_text(errors="replace")
    except OSError:
        return False
    return "draft_load_config:" in text


@dataclass
class Rehearsal:
    plan: Plan
    log: Path
    progress: Progress = field(default_factory=new_progress)
    pid: int | None = None
    ready_s: float | None = None
    total_s: float = 0.0
    answered: int = 0
    reading: scrape.Reading | None = None
    failure: server.StartFailure | None = None
    cause: failures.Cause | None = None
    engine_said: str | None = None  # the engine core's own exception line, on a failure
    died_in: str | None = None  # what the engine was doing when it failed
    log_kept: bool = True

    @property
    def outcome(self) -> str:
        """ready | no-speculation | no-drafts | failed | not-ready"""
        if self.failure is not None:
            return "not-ready" if self.failure.returncode is None and not self.ready_s else "failed"
        counted = self.reading is not None and self.reading.spec
        if counted and self.reading.drafts > 0:  # type: ignore[union-attr]
            return "ready"
        # no counters at all: no speculation configured (in whatever spelling reached vLLM)
        return "no-speculation" if not counted and not self.plan.speculative else "no-drafts"


class _LogReader:
    """The log's lines as they are written, each handed to the progress once."""

    def __init__(
        self, log: Path, progress: Progress, started: float, say: Callable[[RehearseEvent], None]
    ):
        self.log, self.progress, self.started, self.say = log, progress, started, say
        self.offset = 0
        self.partial = b""

    def __call__(self) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        self.offset += len(chunk)
        data = self.partial + chunk
        *complete, self.partial = data.split(b"\n")
        lines = [line.decode(errors="replace") for line in complete]
        elapsed = time.monotonic() - self.started
        for key in self.progress.read(lines, elapsed):
            extra = self.progress.kv_cache_tokens if key == "kv_cache" else None
            self.say(PhaseReached(LABEL[key], elapsed, extra))


def _complete(url: str, model: str, max_tokens: int, api_key: str | None) -> None:
    body = json.dumps(
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,  # random weights may say end-of-text at once: then nothing drafts
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:  # the server's own (ServeArgs.server_key)
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{url}/v1/completions", body, headers)
    deadline = time.monotonic() + COMPLETION_TIMEOUT_S  # the whole answer, not each read
    chunks: list[bytes] = []
    with urllib.request.urlopen(request, timeout=COMPLETION_TIMEOUT_S) as answer:
        while chunk := answer.read1(65536):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise ServerUnreachable(
                    f"the completion was not answered whole within {COMPLETION_TIMEOUT_S:.0f} s"
                )
        if answer.length:  # the connection closed before the Content-Length it promised
            raise http.client.IncompleteRead(b"".join(chunks), answer.length)
    data = json.loads(b"".join(chunks))
    if not isinstance(data, dict) or not data.get("choices"):
        raise ServerUnreachable(f"the completion's answer has no choices: {str(data)[:200]}")


def _await_cause(srv: server.Server, reader: _LogReader, log: Path) -> None:
    """A request failed: give the log a moment to name why (a worker's death comes after)."""
    deadline = time.monotonic() + AFTER_FAILURE_S
    while time.monotonic() < deadline:
        reader()
        if failures.classify(server.log_tail(log, 400)) or srv.process.poll() is not None:
            return
        time.sleep(0.5)


def _exercise(srv: server.Server, r: Rehearsal, reader: _LogReader, started: float) -> None:
    """The completions, then the counters; a failure is recorded on ``r``."""
    p = r.plan
    model = p.args.served_name or p.args.model
    try:
        for _ in range(p.completions):
            _complete(srv.url, model, p.max_tokens, p.args.server_key())
            r.answered += 1
            r.progress.reach("answer", time.monotonic() - started)
        try:
            r.reading = scrape.fetch(srv.url)
        except NoVllmMetrics:  # --disable-log-stats: nothing counted, which the report says
            r.reading = None
    except (OSError, ValueError, http.client.HTTPException, ServerUnreachable) as exc:
        _await_cause(srv, reader, r.log)
        how, code = srv.exit_note()
        what = "its /metrics" if r.answered == p.completions else "a completion"
        detail = exc.message if isinstance(exc, ServerUnreachable) else _http_error(exc)
        r.failure = server.StartFailure(
            f"the server was ready, then failed {what} ({detail}; the server {how})",
            code,
            r.log,
            server.log_tail(r.log),
        )
        return
    how, code = srv.exit_note()
    if code is not None:  # what answered may not have been our server, or not all along
        r.failure = server.StartFailure(
            f"the server {how} during the rehearsal", code, r.log, server.log_tail(r.log)
        )
        return
    if r.reading is not None and r.reading.spec and r.reading.drafts > 0:
        r.progress.reach("drafts", time.monotonic() - started)


def _http_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    return str(getattr(exc, "reason", None) or exc)


def _environment(folder: Path) -> dict[str, str]:
    """The server's temp folder is the rehearsal's own (vLLM leaves files there: its
    ``vllm_dist_*`` init file, its ZeroMQ sockets), removed after the stop; torch's compile cache
    stays where it would be for a real ``vllm serve`` (a cache, not a rehearsal's file)."""
    env = {**ENV, "TMPDIR": str(folder)}
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        try:
            user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
        except (OSError, KeyError):  # no user name to be had: torch's cache goes with the rest
            return env
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
            tempfile.gettempdir(), f"torchinductor_{user}"
        )
    return env


def _clean(folder: Path, keep: Path | None) -> None:
    """Remove the rehearsal's folder, but for ``keep`` (a failure's log)."""
    if keep is None or keep.parent != folder:
        fileops.discard_tree(folder)
        return
    for entry in folder.iterdir():
        if entry != keep:
            if entry.is_dir() and not entry.is_symlink():
                fileops.discard_tree(entry)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def rehearse(python: str, p: Plan, say: Callable[[RehearseEvent], None] | None = None) -> Rehearsal:
    """Start, wait, ask, read, stop. The group is stopped and the rehearsal's folder (the server's
    temp files) removed on every way out; the log is kept when the rehearsal failed (or in
    ``p.log_given``, always)."""
    tell = say or (lambda _: None)
    folder = Path(tempfile.mkdtemp(prefix="vllm-patcher-rh-"))
    log = p.log_given if p.log_given is not None else folder / "server.log"
    r = Rehearsal(p, log)
    started = time.monotonic()
    reader = _LogReader(log, r.progress, started, tell)

    def on_start(pid: int) -> None:
        r.pid = pid
        tell(RehearsalStarted(pid))

    failed_at_start: server.ServerDidNotStart | None = None
    finished = False  # else interrupted: nothing is kept
    try:
        with server.running(
            python,
            p.args,
            log,
            p.ready_timeout_s,
            _environment(folder),
            on_start=on_start,
            on_poll=reader,
        ) as srv:
            reader()
            r.ready_s = srv.ready_s
            if (
                "serving" not in r.progress.seen_at
            ):  # it answered /health: up, whatever its log says
                r.progress.reach("serving", time.monotonic() - started)
            tell(RehearsalReady(srv.ready_s, p.completions))
            _exercise(srv, r, reader, started)
        finished = True
    except server.ServerDidNotStart as exc:
        failed_at_start = exc
        finished = True
    finally:  # interrupted too: no process of the group is left now, so no file is written
        reader()
        r.total_s = time.monotonic() - started
        failed = r.failure is not None or failed_at_start is not None
        keep = log if finished and failed else None
        _clean(folder, keep)
    if failed_at_start is not None:
        r.failure = failed_at_start.failure
    if r.failure is not None:
        logged = server.log_tail(log, 100_000)
        r.engine_said = failures.engine_exception(logged)
        r.died_in = failures.died_in(logged)
        r.cause = failures.classify(logged, r.progress.target_class, p.apply_command)
        if r.cause is None and r.failure.returncode is None and not r.ready_s:
            r.cause = failures.not_ready(
                p.ready_timeout_s, [LABEL[k] for k in r.progress.reached()]
            )
    r.log_kept = r.failure is not None or p.log_given is not None
    return r


def to_dict(r: Rehearsal) -> dict[str, Any]:
    reading = r.reading
    failure = r.failure
    return {
        "outcome": r.outcome,
        "model": r.plan.args.model,
        "server_args": list(r.plan.args.rest),
        "ignored": list(r.plan.ignored),
        "real_drafter": r.plan.real_drafter,
        "ready_s": None if r.ready_s is None else round(r.ready_s, 1),
        "total_s": round(r.total_s, 1),
        "phases": [
            {"key": k, "label": LABEL[k], "at_s": _at(r.progress.seen_at.get(k))}
            for k in r.progress.reached()
        ],
        "stopped_before": r.progress.stopped_before(),
        "target_class": r.progress.target_class,
        "drafter_class": r.progress.drafter_class,
        "kv_cache_tokens": _tokens(r.progress.kv_cache_tokens),
        "completions": r.answered,
        "drafts": None if reading is None or not reading.spec else round(reading.drafts),
        "draft_tokens": None
        if reading is None or not reading.spec
        else round(reading.draft_tokens),
        "acceptance_judged": False,
        "cause": None if r.cause is None else r.cause.to_dict(),
        "known_faults": list(r.plan.known_faults),
        "engine_said": r.engine_said,
        "died_in": r.died_in,
        "failure": None if failure is None else failure.to_dict(),
        "log": str(r.log) if r.log_kept else None,
        "pid": r.pid,
    }


def _tokens(text: str | None) -> int | None:
    """vLLM prints the KV cache's size as ``232,960`` tokens; the report's is a number."""
    digits = (text or "").replace(",", "").replace("_", "")
    return int(digits) if digits.isdigit() else None


def _at(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
