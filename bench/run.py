"""make bench: apply, status, verify and revert timed against their floors, in one run.

Every figure is a whole process, the way a deploy hook runs it, repeated; the table shows the
median and the spread (min-max) and each ratio against a floor measured in the same run on the
same machine: the interpreter's own start-up (`python -c pass`), `git apply` of the same diffs,
and a bare import of the touched vLLM modules in the real vLLM venv.

The tool runs the way a deploy hook runs it: the `vllm-patcher` console script of a venv that
holds only the tool and its dependencies (`pip install .` of this repository into
``<cache>/bench-tool-venv``, reinstalled when the code changed), and the start-up floor is that
venv's own `python -c pass`. Each tool run is paired with a floor run just before it, so a ratio
compares runs taken under the same load on a shared machine.

``--skip-real-venv`` (or ``BENCH_SKIP_REAL_VENV=1``) leaves the real vLLM venv alone when other
work is using it: no verify/bare-import figures then. By default they run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vllm_patcher import sources
from vllm_patcher.patchset import load_catalogue

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.15.1"
TOOL_VENV_NAME = "bench-tool-venv"
# What `pip install .` packages: a change to any of these reinstalls the tool in its venv.
TOOL_INPUTS = ("pyproject.toml", "vllm_patcher", "patches")
# Also needed to build it (the package's long description), but no reason to reinstall.
BUILD_ONLY = ("README.md",)
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
    floor: list[Sample] = field(default_factory=list)  # `python -c pass`, one before each sample

    @property
    def median(self) -> float:
        return statistics.median(s.seconds for s in self.samples)

    @property
    def floor_median(self) -> float:
        return statistics.median(s.seconds for s in self.floor)

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
    floor: list[str] | None = None,
    **kw: object,
) -> Figure:
    """``repeat`` runs of ``command``; with ``floor``, each one right after a run of ``floor``."""
    fig = Figure(name, [])
    for _ in range(repeat):
        ctx = prepare()
        cmd = command(ctx)
        if floor is not None:
            fig.floor.append(run_once(floor))
        fig.samples.append(run_once(cmd, cwd=ctx.get("cwd"), env=ctx.get("env"), **kw))  # type: ignore[arg-type]
    return fig


# --- the tool's own venv ------------------------------------------------------------------------


def interpreter_key() -> str:
    """The interpreter the tool venv is made from: a change means a new venv."""
    return f"{os.path.realpath(sys.executable)} {platform.python_version()}"


def tool_inputs_key() -> str:
    """Hash of everything `pip install .` packages, and of the interpreter the venv is made from."""
    h = hashlib.sha256(interpreter_key().encode() + b"\n")
    for name in TOOL_INPUTS:
        root = REPO / name
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            h.update(str(path.relative_to(REPO)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def tool_venv(cache: Path) -> tuple[Path, str]:
    """A venv holding only vllm-patcher and its dependencies; (its directory, what was done).

    Reused while the hash of the packaged files matches; otherwise `pip install .` again (which
    reinstalls the tool and adds only missing dependencies). It is built from a clean copy of
    the packaged files, so no stale `build/` of setuptools can slip old modules in.
    """
    venv = cache / TOOL_VENV_NAME
    key = tool_inputs_key()
    stamp = venv / ".bench-key"
    with locked(cache / f"{TOOL_VENV_NAME}.lock"):
        python, script = venv / "bin" / "python", venv / "bin" / "vllm-patcher"
        if stamp.exists() and stamp.read_text() == key and script.exists():
            return venv, f"reused (key {key[:12]})"
        start = time.perf_counter()
        made_by = venv / ".bench-interpreter"
        created = not (
            python.exists() and made_by.exists() and made_by.read_text() == interpreter_key()
        )
        if created:
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            made_by.write_text(interpreter_key())
        with tempfile.TemporaryDirectory(prefix="vllm-patcher-bench-src-") as tmp:
            src = Path(tmp) / "src"
            src.mkdir()
            for name in TOOL_INPUTS + BUILD_ONLY:
                if (REPO / name).is_dir():
                    shutil.copytree(
                        REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    shutil.copy2(REPO / name, src / name)
            proc = subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    str(src),
                ],
                capture_output=True,
                text=True,
            )
        if proc.returncode != 0 or not script.exists():
            raise SystemExit(f"pip install of the tool into {venv} failed:\n{proc.stderr}")
        stamp.write_text(key)
        how = "created" if created else "reinstalled"
        return venv, f"{how} in {time.perf_counter() - start:.0f} s (key {key[:12]})"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeat",
        type=int,
        default=int(os.environ.get("BENCH_REPEAT", "15")),
        help="runs per figure (BENCH_REPEAT; verify and bare import run repeat // 5, at least 3)",
    )
    parser.add_argument(
        "--skip-real-venv",
        action="store_true",
        default=os.environ.get("BENCH_SKIP_REAL_VENV", "") not in ("", "0"),
        help="leave the real vLLM venv alone: no verify figure (BENCH_SKIP_REAL_VENV=1)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    repeat = args.repeat
    pristine = sources.fetch_release(VERSION)
    venv_dir = Path(
        os.environ.get("VLLM_PATCHER_TEST_VENV", sources.cache_root() / f"venv-{VERSION}")
    )
    venv_python = venv_dir / "bin" / "python"
    tool_dir, tool_how = tool_venv(sources.cache_root())
    tool = [str(tool_dir / "bin" / "vllm-patcher")]
    floor = [str(tool_dir / "bin" / "python"), "-c", "pass"]
    work = Path(tempfile.mkdtemp(prefix="vllm-patcher-bench-"))
    # the built-ins that have a codemod, without their pinned diffs: apply uses the transforms
    empty_pins = work / "no-pins"
    coded = [p for p in load_catalogue().patches if p.transforms]
    for p in coded:
        shutil.copytree(p.folder, empty_pins / p.name, ignore=shutil.ignore_patterns("vllm-*"))
    (empty_pins / "series").write_text("".join(f"{p.name}\n" for p in coded))
    counter = iter(range(10**6))

    def fresh(patched: bool = False) -> Path:
        dest = work / f"tree-{next(counter)}"
        shutil.copytree(pristine, dest)
        if patched:
            subprocess.run([*tool, "--target", str(dest), "apply"], check=True, capture_output=True)
        return dest

    def tree(patched: bool = False, **extra: object) -> Callable[[], dict[str, object]]:
        return lambda: {"site": fresh(patched), **extra}

    figures: dict[str, Figure] = {}
    run_once(floor)  # warm the page cache for the tool venv
    run_once([*tool, "--version"])
    figures["apply_pinned"] = measure(
        "apply (pinned diff)",
        repeat,
        tree(),
        lambda c: [*tool, "--target", str(c["site"]), "apply"],
        floor=floor,
    )
    figures["apply_transform"] = measure(
        "apply (libcst transform)",
        repeat,
        tree(env={"VLLM_PATCHER_PATCHES_DIR": str(empty_pins)}),
        lambda c: [*tool, "--target", str(c["site"]), "apply"],
        floor=floor,
    )
    diffs = [  # in series order, as git apply must take them
        str(p.folder / f"vllm-{VERSION}" / "patch.diff")
        for p in load_catalogue().patches
        if VERSION in p.pinned_versions
    ]
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
        lambda c: [*tool, "--target", str(patched_site), "status"],
        floor=floor,
    )
    figures["revert"] = measure(
        "revert",
        repeat,
        tree(patched=True),
        lambda c: [*tool, "--target", str(c["site"]), "revert"],
        floor=floor,
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
        lambda c: [*tool, "--target", str(c["site"]), "verify"],
        expect=1,
    )
    # every floor run of the tool figures together: the start-up row
    figures["startup"] = Figure(
        "python -c pass (tool venv)", [s for fig in figures.values() for s in fig.floor]
    )

    heavy = max(3, repeat // 5)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if args.skip_real_venv:
        real_venv = "skipped (--skip-real-venv / BENCH_SKIP_REAL_VENV)"
    elif not (venv_dir / ".ready").exists() or not venv_python.exists():
        real_venv = f"skipped ({venv_dir} is missing or not ready: make test-venv)"
    else:
        real_venv = ""
    if not real_venv:
        subprocess.run(
            [*tool, "--python", str(venv_python), "revert", "--force"], capture_output=True
        )
        subprocess.run(
            [*tool, "--python", str(venv_python), "apply"], check=True, capture_output=True
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
                lambda c: [*tool, "--python", str(venv_python), "verify"],
            )
        finally:
            subprocess.run(
                [*tool, "--python", str(venv_python), "revert"], check=True, capture_output=True
            )
    shutil.rmtree(work, ignore_errors=True)
    print(f"tool venv: {tool_dir} ({tool_how})")
    report(figures, repeat, heavy, real_venv)


def report(f: dict[str, Figure], repeat: int, heavy: int, real_venv: str) -> None:
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(key: str, ratio: float | None, against: str, target: float | None) -> None:
        fig = f[key]
        met = "-" if target is None or ratio is None else ("met" if ratio <= target else "NOT MET")
        r = "-" if ratio is None else f"{ratio:.2f} x {against}"
        t = "-" if target is None else f"<= {target:g} x"
        rows.append((fig.name, fmt(fig.median), fig.spread, r, t, met))

    def startup_row(key: str, target: float) -> None:
        # against the floor runs paired with this figure's own runs (same load)
        row(key, f[key].median / f[key].floor_median, "start-up", target)

    row("startup", None, "", None)
    startup_row("apply_pinned", 8)
    row("apply_pinned", f["apply_pinned"].median / f["git_apply"].median, "git apply", None)
    startup_row("apply_transform", 40)
    row("git_apply", None, "", None)
    startup_row("status", 6)
    startup_row("revert", 8)
    if "verify" in f:
        row("bare_import", None, "", None)
        row("verify", f["verify"].median / f["bare_import"].median, "bare import", 1.15)
    else:
        rows.append(("verify (all tiers, real venv)", real_venv, "-", "-", "<= 1.15 x", "-"))
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

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"vllm-patcher bench, vLLM {VERSION}, {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {os.cpu_count()} cores (load {load}), "
        f"Python {platform.python_version()}, {repeat} runs ({heavy} for verify and bare import); "
        "start-up ratios against the floor runs paired with each figure's runs"
    )
    header = ("figure", "median", "spread", "ratio", "target", "")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
