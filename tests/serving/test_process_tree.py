"""A server's child that leaves its process group (``setsid``) is stopped with the server:
serving.server.running follows the server's descendants in /proc. The server here
is a small HTTP process of our own that answers /health and starts such a child: what is tested
is the launcher's stopping, which is the same for any command."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from vllm_patcher.serving import server
from vllm_patcher.serving.args import ServeArgs

from .procs import alive

FAKE = """
import http.server, os, subprocess, sys
port, pid_file = int(sys.argv[1]), sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)  # a new session: out of the server's group
open(pid_file, "w").write(str(child.pid))

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.mark.parametrize("followed", [True, False])
def test_a_child_that_called_setsid_is_stopped_with_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, followed: bool
) -> None:
    """``followed``: the load's start noted it (Server.follow), or only the stop finds it."""
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE)
    monkeypatch.setattr(
        server,
        "command",
        lambda python, args, port: [
            sys.executable,
            str(script),
            str(port),
            str(pid_file),
        ],  # fmt: skip
    )
    child = None
    try:
        with server.running(sys.executable, ServeArgs("m", ()), tmp_path / "log", 60) as srv:
            deadline = time.monotonic() + 30
            while not (pid_file.exists() and pid_file.read_text()):
                assert time.monotonic() < deadline, "the fake server started no child"
                time.sleep(0.05)
            child = int(pid_file.read_text())
            assert alive(child) and os.getpgid(child) != srv.pid  # a killpg alone misses it
            if followed:
                srv.follow()
                assert child in srv.known
        assert not alive(child), f"the server's setsid child {child} outlived its stop"
    finally:
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)
