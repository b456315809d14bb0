"""make bench: apply, status, verify and revert timed against their floors, in one run.

Every figure is a whole process, the way a deploy hook runs it, repeated; the table shows the
median and the spread (min-max) and each ratio against a floor measured in the same run on the
same machine: the interpreter's own start-up (`python -c pass`), `git apply` of the same diffs,
and a bare import of the touched vLLM modules in the real vLLM venv.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_patcher import sources

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.15.1"
TOOL = [str(Path(sys.executable).with_name("vllm-patcher"))]
MODULES = (
    "vllm.config.speculative",
    "vllm.v1.spec_decode.eagle",
    "vllm.model_executor.models.deepseek_v2",
    "vllm.model_executor.models.kimi_k25",
)
SEED_LOAD_SECONDS = 25 * 60


@dataclass
class Sample:
    seconds: float
    max_rss_kib: int


@dataclass
class Figure:
    name: str
    samples: list[Sample]

    @property
    def median(self) -> float:
        return statistics.median(s.seconds for s in self.samples)

    @property
    def spread(self) -> str:
        xs = [s.seconds for s in self.samples]
        return f"{fmt(min(xs))}-{fmt(max(xs))}"

    @property
    def rss_mib(self) -> float:
        return max(s.max_rss_kib for s in self.samples) / 1024


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def run_once(
    cmd: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    expect: int | None = 0,
) -> Sample:
    full_env = dict(os.environ, **(env or {}))
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=full_env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if expect is not None and proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}, expected {expect}")
    return Sample(elapsed, usage.ru_maxrss)


def measure(
    name: str,
    repeat: int,
    prepare: Callable[[], dict[str, object]],
    command: Callable[[dict[str, object]], list[str]],
    **kw: object,
) -> Figure:
    samples = []
    for _ in range(repeat):
        ctx = prepare()
        cmd = command(ctx)
        samples.append(run_once(cmd, cwd=ctx.get("cwd"), env=ctx.get("env"), **kw))  # type: ignore[arg-type]
    return Figure(name, samples)


def main() -> None:
    repeat = int(os.environ.get("BENCH_REPEAT", "15"))
    pristine = sources.fetch_release(VERSION)
    venv_python = (
        Path(os.environ.get("VLLM_PATCHER_TEST_VENV", sources.cache_root() / f"venv-{VERSION}"))
        / "bin"
        / "python"
    )
    work = Path(tempfile.mkdtemp(prefix="vllm-patcher-bench-"))
    empty_pins = work / "no-pins"
    empty_pins.mkdir()
    counter = iter(range(10**6))

    def fresh(patched: bool = False) -> Path:
        dest = work / f"tree-{next(counter)}"
        shutil.copytree(pristine, dest)
        if patched:
            subprocess.run([*TOOL, "--target", str(dest), "apply"], check=True, capture_output=True)
        return dest

    def tree(patched: bool = False, **extra: object) -> Callable[[], dict[str, object]]:
        return lambda: {"site": fresh(patched), **extra}

    figures: dict[str, Figure] = {}
    figures["startup"] = measure(
        "python -c pass", repeat * 2, dict, lambda c: [sys.executable, "-c", "pass"]
    )
    figures["apply_pinned"] = measure(
        "apply (pinned diff)",
        repeat,
        tree(),
        lambda c: [*TOOL, "--target", str(c["site"]), "apply"],
    )
    figures["apply_transform"] = measure(
        "apply (libcst transform)",
        repeat,
        tree(env={"VLLM_PATCHER_PATCHES_DIR": str(empty_pins)}),
        lambda c: [*TOOL, "--target", str(c["site"]), "apply"],
    )
    diffs = sorted(str(p) for p in (REPO / "patches" / f"vllm-{VERSION}").glob("*.diff"))
    figures["git_apply"] = measure(
        "git apply (same diffs)",
        repeat,
        lambda: {"cwd": fresh()},
        lambda c: ["git", "apply", *diffs],
    )
    patched_site = fresh(patched=True)
    figures["status"] = measure(
        "status (patched tree)",
        repeat,
        dict,
        lambda c: [*TOOL, "--target", str(patched_site), "status"],
    )
    figures["revert"] = measure(
        "revert",
        repeat,
        tree(patched=True),
        lambda c: [*TOOL, "--target", str(c["site"]), "revert"],
    )

    def planted() -> dict[str, object]:
        site = fresh(patched=True)
        path = site / "vllm/model_executor/models/deepseek_v2.py"
        path.write_text(
            path.read_text().replace(
                "SupportsPP, SupportsEagle3\n", "SupportsPP, SupportsEagle3,\n", 1
            )
        )
        return {"site": site}

    figures["syntax"] = measure(
        "verify: planted trailing comma",
        repeat,
        planted,
        lambda c: [*TOOL, "--target", str(c["site"]), "verify"],
        expect=1,
    )

    heavy = max(3, repeat // 5)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if venv_python.exists():
        subprocess.run(
            [*TOOL, "--python", str(venv_python), "revert", "--force"], capture_output=True
        )
        subprocess.run(
            [*TOOL, "--python", str(venv_python), "apply"], check=True, capture_output=True
        )
        try:
            bare = [str(venv_python), "-I", "-c", "import " + ", ".join(MODULES)]
            run_once(bare, env=offline)  # warm the page cache for both
            figures["bare_import"] = measure(
                "bare import of the 4 modules", heavy, lambda: {"env": offline}, lambda c: bare
            )
            figures["verify"] = measure(
                "verify (all tiers, real venv)",
                heavy,
                dict,
                lambda c: [*TOOL, "--python", str(venv_python), "verify"],
            )
        finally:
            subprocess.run(
                [*TOOL, "--python", str(venv_python), "revert"], check=True, capture_output=True
            )
    shutil.rmtree(work, ignore_errors=True)
    report(figures, repeat, heavy)


def report(f: dict[str, Figure], repeat: int, heavy: int) -> None:
    start = f["startup"].median
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(key: str, ratio: float | None, against: str, target: float | None) -> None:
        fig = f[key]
        met = "-" if target is None or ratio is None else ("met" if ratio <= target else "NOT MET")
        r = "-" if ratio is None else f"{ratio:.2f} x {against}"
        t = "-" if target is None else f"<= {target:g} x"
        rows.append((fig.name, fmt(fig.median), fig.spread, r, t, met))

    row("startup", None, "", None)
    row("apply_pinned", f["apply_pinned"].median / start, "start-up", 10)
    row("apply_pinned", f["apply_pinned"].median / f["git_apply"].median, "git apply", None)
    row("apply_transform", f["apply_transform"].median / start, "start-up", 40)
    row("git_apply", None, "", None)
    row("status", f["status"].median / start, "start-up", 6)
    row("revert", f["revert"].median / start, "start-up", 10)
    if "verify" in f:
        row("bare_import", None, "", None)
        row("verify", f["verify"].median / f["bare_import"].median, "bare import", 1.15)
    syntax = f["syntax"].median
    rows.append(
        (
            f["syntax"].name,
            fmt(syntax),
            f["syntax"].spread,
            f"1/{SEED_LOAD_SECONDS / syntax:,.0f} of the seed's 25 min load",
            "< 1 s",
            "met" if syntax < 1 else "NOT MET",
        )
    )
    for key, label in (
        ("apply_pinned", "peak RSS apply (pinned)"),
        ("apply_transform", "peak RSS apply (transform)"),
        ("status", "peak RSS status"),
    ):
        mib = f[key].rss_mib
        target = 100 if key.startswith("apply") else None
        rows.append(
            (
                label,
                f"{mib:.0f} MiB",
                "-",
                "-",
                "<= 100 MiB" if target else "-",
                ("met" if mib <= 100 else "NOT MET") if target else "-",
            )
        )

    print(
        f"vllm-patcher bench, vLLM {VERSION}, {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{repeat} runs ({heavy} for verify and bare import)"
    )
    header = ("figure", "median", "spread", "ratio", "target", "")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
