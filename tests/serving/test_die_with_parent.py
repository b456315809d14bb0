"""A SIGKILL of the tool takes its children down: servers (serving.server.running)
and load clients (serving.client, through runtime.run_script with own_group) are started with
runtime.die_with_parent, so Linux sends them SIGTERM when the tool dies by a signal it cannot
catch. The tool arms it on Linux only, where this suite runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .procs import alive

ROOT = Path(__file__).resolve().parents[2]

TOOL = """
import sys
from vllm_patcher import runtime
child = "import os, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
runtime.run_script(sys.executable, ["-c", "import sys; " + child, sys.argv[1]], timeout=600,
                   isolated=False, own_group=True)
"""


def test_a_sigkill_of_the_tool_stops_the_child_it_started_in_its_own_group(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child.pid"
    tool = subprocess.Popen(
        [sys.executable, "-c", TOOL, str(pid_file)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert tool.poll() is None, "the tool ended before its child started"
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert alive(child)
        assert os.getpgid(child) != os.getpgid(tool.pid)  # its own group: a killpg would miss it
        tool.send_signal(signal.SIGKILL)
        tool.wait(timeout=30)
        deadline = time.monotonic() + 30
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), f"child {child} outlived the SIGKILLed tool"
    finally:
        if tool.poll() is None:
            tool.kill()
        if pid_file.exists() and pid_file.read_text() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_server_launcher_arms_it_too() -> None:
    """serving.server.running hands Popen the same preexec_fn (read from its source: starting a
    real server needs a vLLM venv, which tests/e2e does)."""
    from vllm_patcher.serving import server

    source = Path(server.__file__).read_text()
    assert "preexec_fn=die_with_parent()" in source
