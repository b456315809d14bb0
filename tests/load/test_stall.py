"""A stuck server stops its load within the stall bound (issue 35, item 11): the stall is named
once requests are out and no token moves, never while tokens move or no request is out, a
/metrics that stops answering is said as such, and a watch that names a stall stops the script
and its process group. The servers are local fakes serving real /metrics text."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from vllm_patcher import runtime
from vllm_patcher.load import stall

from ..payoff.scrapes import http_server, metrics


# 11. a stuck server
def test_a_stall_is_named_once_generation_tokens_stand_still_and_not_while_they_move() -> None:
    tokens = [0.0]

    def answer(n: int) -> tuple[int, str, bytes]:
        return 200, "text/plain", metrics(generation=tokens[0], running=2, spec=False).encode()

    with http_server(answer) as url:
        watch = stall.Stall(url, stall_s=0.3)
        for _ in range(4):  # moving: never stuck
            tokens[0] += 10
            assert watch() is None
            time.sleep(0.15)
        assert watch() is None  # stood still for one look only
        time.sleep(0.4)
        said = watch()
    assert said is not None and "stuck" in said and "no token moved" in said


def test_a_watch_that_names_a_stall_stops_the_script_and_its_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    child = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
    looks = [0]

    def watch() -> str | None:
        looks[0] += 1
        return "stuck" if pid_file.exists() and looks[0] >= 2 else None

    started = time.monotonic()
    with pytest.raises(runtime.ScriptStopped, match="stuck"):
        runtime.run_script(sys.executable, ["-c", child, str(pid_file)], timeout=600,
                           isolated=False, own_group=True, watch=watch, watch_every_s=0.2)  # fmt: skip
    assert time.monotonic() - started < 60
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_idle_server_is_not_stuck_and_a_silent_metrics_is_said_as_such() -> None:
    def answer(n: int) -> tuple[int, str, bytes]:
        return 200, "text/plain", metrics(generation=5, running=0, spec=False).encode()

    with http_server(answer) as url:
        watch = stall.Stall(url, stall_s=0.2)
        assert watch() is None
        time.sleep(0.3)
        assert watch() is None  # nothing out: the client may still be starting
    gone = stall.Stall("http://127.0.0.1:9", stall_s=0.0)
    said = gone()
    assert said is not None and "stopped answering /metrics" in said
