"""serving.server, the one launcher of vLLM servers, asserted on what it returns: the command it
runs, the ``Server`` a ready start yields, the ``StartFailure`` of a server that exits or is never
ready, and a process group that is gone on every way out. The servers are small scripts of our
own standing in for the command (the launcher's work is the same for any command)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_patcher.serving import process_tree, server, watchdog
from vllm_patcher.serving.args import ServeArgs

from .procs import alive

HEALTHY = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
EXITS = "import sys; print('CUDA out of memory', flush=True); sys.exit(3)"
SILENT = "import time; print('loading', flush=True); time.sleep(600)"


def _serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str) -> None:
    script = tmp_path / "fake_server.py"
    script.write_text(source)
    monkeypatch.setattr(
        server, "command", lambda python, args, port: [sys.executable, str(script), str(port)]
    )


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_command_is_vllm_s_own_server_on_loopback_and_a_port_of_ours() -> None:
    args = ServeArgs("/models/t", ("--port", "9000", "--host", "0.0.0.0"))
    cmd = server.command("/v/bin/python", args, 41234)
    assert cmd[:5] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                       "/models/t"]  # fmt: skip
    # the user's host and port are overridden: the last of repeated flags wins in vLLM's parser
    assert cmd[-4:] == ["--host", "127.0.0.1", "--port", "41234"]


def test_a_ready_server_is_yielded_with_its_url_group_and_log_and_stopped_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _serve(monkeypatch, tmp_path, HEALTHY)
    log = tmp_path / "server.log"
    with server.running(sys.executable, ServeArgs("m", ()), log, 60) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.log == log
        assert os.getpgid(srv.pid) == srv.pid  # a process group of its own
        assert srv.ready_s > 0 and srv.exit_note() == ("is still running", None)
        pid = srv.pid
    assert srv.process.returncode is not None and not alive(pid) and _group_gone(pid)
    assert "serving" in log.read_text()  # the log is kept


def test_a_server_that_exits_before_it_is_ready_is_a_start_failure_with_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _serve(monkeypatch, tmp_path, EXITS)
    with (
        pytest.raises(server.ServerDidNotStart) as caught,
        server.running(sys.executable, ServeArgs("m", ()), tmp_path / "log", 60),
    ):
        raise AssertionError("yielded a server that exited")
    failure = caught.value.failure
    assert failure.reason == "the server exited with code 3 before it was ready"
    assert (failure.returncode, failure.signal_name) == (3, None)
    assert failure.tail == ("CUDA out of memory",) and failure.log == tmp_path / "log"
    assert failure.to_dict()["log_tail"] == ["CUDA out of memory"]


def test_a_server_never_ready_is_stopped_at_the_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _serve(monkeypatch, tmp_path, SILENT)
    started: list[int] = []
    with (
        pytest.raises(server.ServerDidNotStart) as caught,
        server.running(
            sys.executable, ServeArgs("m", ()), tmp_path / "log", 1, on_start=started.append
        ),
    ):
        raise AssertionError("yielded a server that never answered")
    failure = caught.value.failure
    assert failure.reason == "the server was not ready within 1 s" and failure.returncode is None
    assert failure.tail == ("loading",)
    assert len(started) == 1 and not alive(started[0]) and _group_gone(started[0])


def test_a_start_failure_names_the_signal_that_ended_the_server() -> None:
    killed = server.StartFailure("the server was killed by SIGKILL", -9, None, ())
    assert killed.signal_name == "SIGKILL" and killed.to_dict()["signal"] == "SIGKILL"
    assert server.StartFailure("x", 1, None, ()).signal_name is None


def test_a_server_s_watchdog_ends_with_its_stop_and_leaves_the_group_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _serve(monkeypatch, tmp_path, HEALTHY)
    with server.running(sys.executable, ServeArgs("m", ()), tmp_path / "log", 60) as srv:
        assert srv.watchdog is not None and srv.watchdog.proc is not None
        dog = srv.watchdog.proc
        assert dog.poll() is None and os.getsid(dog.pid) == dog.pid  # a session of its own
    assert dog.returncode == 0 and not alive(dog.pid)  # released: "done", no signal sent


IGNORES_TERM = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)  # left the group: followed by its start time
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def test_a_watchdog_whose_tool_is_gone_stops_the_group_and_what_left_it(tmp_path: Path) -> None:
    """The tool's end of the pipe closes (the tool died, whatever killed it): SIGTERM, which the
    server ignores, then SIGKILL after the grace, to its group and to the descendant it was told
    of that left it."""

    pids = tmp_path / "pids"
    wedged = subprocess.Popen(
        [sys.executable, "-c", IGNORES_TERM, str(pids)], start_new_session=True
    )
    dog = watchdog.start(grace_s=1.0)
    assert dog.proc is not None
    children: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline, "the wedged server never started"
            time.sleep(0.05)
        children = [int(p) for p in pids.read_text().split()]
        dog.guard(wedged.pid)
        dog.follow(process_tree.descendants(wedged.pid))
        dog.proc.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while any(alive(p) for p in children) and time.monotonic() < deadline:
            wedged.poll()
            time.sleep(0.1)
        assert not any(alive(p) for p in children), children
        assert wedged.wait(timeout=30) == -signal.SIGKILL  # SIGTERM ignored: killed after the grace
        assert dog.proc.wait(timeout=30) == 0
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if wedged.poll() is None:
            wedged.kill()
        dog.release()
