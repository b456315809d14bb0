"""Whatever kills ``payoff sweep``, the servers it started are gone within a bounded time: a
SIGTERM that the tool turns into a stop of the server's group, then a SIGKILL of the tool 5 s later
(what ``timeout -k``, systemd and a CI cancel do) before its 30 s grace is over, leaves the server
to its watchdog (serving.watchdog), which stops the group when the tool is gone, SIGKILL after a
grace. The server here is a fake of our own that ignores SIGTERM (a wedged vLLM does) and serves
real /metrics text; the load client is a fake that never answers a run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..conftest import REPO
from ..serving.procs import alive

SERVER = """
import http.server, os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # wedged: only SIGKILL stops it
port, pid_file = int(sys.argv[1]), sys.argv[2]
sys.path.insert(0, sys.argv[3])
from tests.payoff.scrapes import metrics
body = metrics(per_pos=(0.0,)).encode()

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

httpd = http.server.HTTPServer(("127.0.0.1", port), H)
with open(pid_file + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {port}")
os.replace(pid_file + ".tmp", pid_file)
httpd.serve_forever()
"""

# parses any arguments; takes a run, says so in a file, and never answers it
CLIENT = """
import json, os, sys, time
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["id"], "taken": True}), flush=True)
    if request.get("check"):
        print(json.dumps({"id": request["id"], "parsed": True}), flush=True)
        continue
    open(os.environ["LOADING"], "w").write("taken")
    time.sleep(600)
"""

DRIVER = """
import sys, types
from pathlib import Path
server_script, client_script, pid_file, repo = sys.argv[1:5]
sys.path.insert(0, repo)
from vllm_patcher.cli import main
from vllm_patcher.cli.base import Options
from vllm_patcher.serving import client, server
client.SCRIPT = Path(client_script)
server.command = lambda python, args, port: [sys.executable, server_script, str(port), pid_file,
                                             repo]
Options.vllm_target = lambda self, what: types.SimpleNamespace(python=Path(sys.executable),
                                                               version=None)
main(["payoff", "sweep", "--k", "0,1", "--concurrency", "1", "--repeat", "1", "--",
      "/m/t", "--speculative-config", sys.argv[5]], prog_name="vllm-patcher")
"""


def _port_free(port: int) -> bool:
    """A new server could listen on ``port`` (as uvicorn binds: SO_REUSEADDR, so the health
    checks' connections in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def test_a_server_that_ignores_sigterm_is_gone_after_the_sweep_is_sigtermed_then_sigkilled(
    tmp_path: Path,
) -> None:
    server_script, client_script = tmp_path / "server.py", tmp_path / "client.py"
    server_script.write_text(SERVER)
    client_script.write_text(CLIENT)
    pid_file, loading = tmp_path / "server.pid", tmp_path / "loading"
    config = json.dumps({"method": "eagle3", "model": "/m/d", "num_speculative_tokens": 1})
    tool = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(server_script), str(client_script), str(pid_file),
         str(REPO), config],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "LOADING": str(loading),
             "VLLM_PATCHER_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    server_pid = None
    try:
        deadline = time.monotonic() + 120
        while not loading.exists():  # the server is ready and the warm-up load is out
            assert tool.poll() is None, tool.communicate()
            assert time.monotonic() < deadline, "the sweep never put a load on its server"
            time.sleep(0.1)
        server_pid, port = map(int, pid_file.read_text().split())
        assert alive(server_pid) and not _port_free(port)
        tool.send_signal(signal.SIGTERM)
        time.sleep(5)  # the tool is stopping the server, which ignores the SIGTERM
        assert alive(server_pid)
        tool.send_signal(signal.SIGKILL)
        tool.wait(timeout=30)
        deadline = time.monotonic() + 30
        while (alive(server_pid) or not _port_free(port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(server_pid), f"the server {server_pid} outlived the killed sweep"
        assert _port_free(port), f"port {port} is still held after the sweep was killed"
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
        if server_pid is not None and alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)
