"""A stuck server stops its load within the stall bound: the stall is named
once requests are out and no token moves, never while tokens move or no request is out, a
/metrics that stops answering is said as such, and a watch that names a stall stops the script
and its process group. The servers are local fakes serving real /metrics text."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


# a load client that sends each run's requests (two at once, to its --base-url) and waits for
# answers that never come; it answers argument checks
HANGING_CLIENT = """
import json, socket, sys, time, urllib.parse
for line in sys.stdin:
    request = json.loads(line)
    sys.stderr.write("vllm-patcher: request taken\\n")
    print(json.dumps({"id": request["id"], "taken": True}), flush=True)
    argv = request["argv"]
    url = urllib.parse.urlsplit(argv[argv.index("--base-url") + 1])
    held = []
    for _ in range(2):
        s = socket.create_connection((url.hostname, url.port))
        body = b'{"prompt": "hi", "max_tokens": 8}'
        s.sendall(b"POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: "
                  b"application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (len(body), body))
        held.append(s)
    for s in held:
        s.recv(1)  # never answered
"""


@contextmanager
def _front_end_hang() -> Iterator[str]:
    """A server whose API front end takes requests and never answers them, nor hands them to its
    engine: /metrics answers, with nothing running or waiting and no token moving."""
    release = threading.Event()
    body = metrics(generation=5, running=0, waiting=0, spec=False).encode()
    try:
        with http_server(lambda n: (200, "text/plain", body), lambda: release.wait(120)) as url:
            yield url
    finally:
        release.set()  # the POSTs taken, never answered, end with the test


def test_a_front_end_that_takes_requests_and_hands_none_to_its_engine_is_stuck(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The server's gauges say nothing is running or waiting, but the load client's own requests
    are out: they count, so the stall is named and the client stopped, not at its hour."""
    from vllm_patcher.errors import ServerUnreachable
    from vllm_patcher.load import vllm_bench
    from vllm_patcher.serving import client as load_client

    script = tmp_path / "client.py"
    script.write_text(HANGING_CLIENT)
    monkeypatch.setattr(load_client, "SCRIPT", script)
    monkeypatch.setattr(vllm_bench, "WATCH_EVERY_S", 0.2)
    # the bound of this test, far below the client's own hour: a stall not named fails it
    monkeypatch.setattr(load_client, "run", functools.partial(load_client.run, timeout_s=60))
    with _front_end_hang() as url:
        watch = stall.Stall(url, stall_s=1.0)
        with pytest.raises(ServerUnreachable) as caught:
            vllm_bench.client(sys.executable, ["--base-url", url], watch=watch)
    said = caught.value.message
    assert "stuck" in said and "2 requests out" in said, said
    assert "none running or waiting" in said, said
