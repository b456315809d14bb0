"""Run a script in another interpreter (the target's, a Ray driver's) and read its answer.

One protocol for every such script (the locate query, the Hugging Face cache lookup, verify's
probe, the cluster driver): the script prints one JSON object as its last JSON line on stdout;
diagnostics go to stderr. Each caller keeps its own error messages: ``run_script`` says what
happened (``ScriptRun``) or why the script did not run at all (``ScriptNotRun``), never a policy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ScriptNotRun(Exception):
    """The interpreter could not be started, or the script outlived its timeout."""

    def __init__(self, cause: OSError | subprocess.TimeoutExpired | str) -> None:
        super().__init__(str(cause))
        self.cause = cause

    @property
    def timed_out(self) -> bool:
        return isinstance(self.cause, subprocess.TimeoutExpired)

    @property
    def strerror(self) -> str | None:
        return self.cause.strerror if isinstance(self.cause, OSError) else None


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str
    answer: dict[str, Any] | None  # the last line of stdout that is a JSON object

    def stderr_tail(self, default: str = "no output") -> str:
        """The last line of stderr (where a traceback ends with its exception), or ``default``."""
        return (self.stderr.strip().splitlines() or [default])[-1]


def last_json_object(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> Callable[[], None] | None:
    """``preexec_fn`` for a child the tool must not leave behind when it is killed by a signal it
    cannot catch (a supervisor's SIGKILL, the OOM killer): the kernel sends the child SIGTERM,
    and a vLLM server stops its own group then; the load client (no handler of its own) ends,
    and each run's fork of it (scripts/bench_client.py) arms the same signal for itself. Linux only
    (PR_SET_PDEATHSIG); elsewhere None, and only the tool's own exits stop its children."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def arm() -> None:  # in the child, between fork and exec
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before that: nobody is left to stop it
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def run_script(
    python: str | Path,
    args: Sequence[str],
    *,
    timeout: float,
    isolated: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    own_group: bool = False,
    watch: Callable[[], str | None] | None = None,
    watch_every_s: float = 10.0,
) -> ScriptRun:
    """``python [-I] ARGS...``: ``args`` is ``["-c", SOURCE, ...]`` or ``[SCRIPT, ...]``.

    ``isolated`` (``-I``) keeps the target's own environment variables and user site out of the
    answer; the tool's interpreter running its own script may keep them. ``own_group`` (a load
    client, which may start processes of its own): the script runs in a process group of its own,
    killed whole on every way out that is not its own end (a timeout, Ctrl-C, an exception).
    ``watch``: asked every ``watch_every_s`` while the script runs; a reason it returns stops the
    script (``ScriptStopped``), as a timeout would (a load on a server that stopped answering).
    """
    command = [str(python), *(["-I"] if isolated else []), *args]
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=own_group,
            preexec_fn=die_with_parent() if own_group else None,
        )
    except OSError as exc:
        raise ScriptNotRun(exc) from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            step = left if watch is None else min(left, watch_every_s)
            try:
                stdout, stderr = proc.communicate(timeout=max(step, 0.01))
                break
            except subprocess.TimeoutExpired as exc:
                if time.monotonic() >= deadline:
                    _kill(proc, own_group)
                    raise ScriptNotRun(exc) from None
                said = watch() if watch is not None else None
                if said:
                    _kill(proc, own_group)
                    raise ScriptStopped(said) from None
    except ScriptNotRun:
        raise
    except BaseException:
        _kill(proc, own_group)
        raise
    if own_group:  # what the script started and left behind goes with it
        _kill(proc, own_group)
    return ScriptRun(proc.returncode, stdout, stderr, last_json_object(stdout))


class ScriptStopped(ScriptNotRun):
    """A ``watch`` of run_script stopped the script: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _kill(proc: subprocess.Popen[str], group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def environ(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``."""
    return {**os.environ, **extra}
