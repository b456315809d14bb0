"""Run a script in another interpreter (the target's, a Ray driver's) and read its answer.

One protocol for every such script (the locate query, the Hugging Face cache lookup, verify's
probe, the cluster driver): the script prints one JSON object as its last JSON line on stdout;
diagnostics go to stderr. Each caller keeps its own error messages: ``run_script`` says what
happened (``ScriptRun``) or why the script did not run at all (``ScriptNotRun``), never a policy.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ScriptNotRun(Exception):
    """The interpreter could not be started, or the script outlived its timeout."""

    def __init__(self, cause: OSError | subprocess.TimeoutExpired) -> None:
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


def run_script(
    python: str | Path,
    args: Sequence[str],
    *,
    timeout: float,
    isolated: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ScriptRun:
    """``python [-I] ARGS...``: ``args`` is ``["-c", SOURCE, ...]`` or ``[SCRIPT, ...]``.

    ``isolated`` (``-I``) keeps the target's own environment variables and user site out of the
    answer; the tool's interpreter running its own script may keep them.
    """
    command = [str(python), *(["-I"] if isolated else []), *args]
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ScriptNotRun(exc) from None
    return ScriptRun(proc.returncode, proc.stdout, proc.stderr, last_json_object(proc.stdout))


def environ(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``."""
    return {**os.environ, **extra}
