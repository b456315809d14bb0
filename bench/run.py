"""make bench: apply, status, verify and revert timed against their floors, in one run.

Every figure is a whole process, the way a deploy hook runs it, repeated; the table shows the
median and the spread (min-max). The one start-up bound is `status` under 250 ms wall on the
machine the bench runs on; apply and verify are compared with floors measured in the same run:
`git apply` of the same diffs, and a bare import of the touched vLLM modules in the real vLLM venv.
The interpreter's own start-up (`python -c pass`) is shown beside them, for reference only.

The tool runs the way a deploy hook runs it: the `vllm-patcher` console script of a venv that
holds only the tool and its dependencies (`pip install .` of this repository into
``<cache>/bench-tool-venv``, reinstalled when the code changed); `python -c pass` is that venv's.
Each tool run is paired with a `python -c pass` run just before it; the growth table subtracts
it, so its figures compare runs taken under the same load on a shared machine.

``--skip-real-venv`` (or ``BENCH_SKIP_REAL_VENV=1``) leaves the real vLLM venv alone when other
work is using it: no verify/bare-import figures then. By default they run.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
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

from vllm_patcher.catalogue.folders import load_catalogue
from vllm_patcher.catalogue.model import PATCH_TOML
from vllm_patcher.catalogue.writer import write_pin
from vllm_patcher.cli.render.events import fetch_line
from vllm_patcher.wheels import sources

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
STATUS_MAX_SECONDS = 0.25  # the one start-up bound: status, wall time, on this machine
# The user patch of the "built-ins + 1 user patch" figures: one file stacked on a built-in's
# (its diff made on the bytes the built-ins leave), and one no built-in touches on VERSION.
USER_PATCH = "bench-user-patch"
USER_STACKED = "vllm/model_executor/models/deepseek_v2.py"
USER_OWN = "vllm/model_executor/models/interfaces.py"
# The growth table: N synthetic user patches over a pristine tree of VERSION holding the
# built-ins' files and max(GROWTH_SIZES) more modules from GROWTH_UNDER (the first ones by name,
# in their own cache so the tree the tests share is never re-extracted under them). Modules
# under GROWTH_MIN_BYTES (package inits, stubs) are left out: per-MB figures of a 1 kB file are
# noise.
GROWTH_SIZES = (1, 10, 50)
GROWTH_UNDER = "vllm/model_executor/models/"
GROWTH_MIN_BYTES = 4096
GROWTH_CACHE = "bench-growth"


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


# --- user patches: one beside the built-ins, and the growth table ------------------------------


def synthetic_edit(text: str, tag: str) -> str:
    """A comment line first and one last: two hunks (one in a short file); still valid Python."""
    return f"# vllm-patcher bench: {tag}\n{text}# vllm-patcher bench: end of {tag}\n"


def read_source(path: Path) -> str:
    """The exact text of a file (no newline translation, so its hash is the bytes' hash)."""
    return path.read_bytes().decode("utf-8")


def write_user_patch(root: Path, name: str, files: list[tuple[str, str, str]]) -> None:
    """Patch folder ``root/name`` for VERSION: ``files`` = (rel, before text, after text)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / PATCH_TOML).write_text(
        f'name = "{name}"\nsummary = "bench: synthetic user patch"\nreleases = "=={VERSION}"\n'
    )
    write_pin(folder / f"vllm-{VERSION}", VERSION, name, files)


def make_user_patch(root: Path, pristine: Path, patched: Path) -> None:
    """The one user patch: USER_STACKED on the built-ins' result, USER_OWN on pristine bytes."""
    own = read_source(pristine / USER_OWN)
    if read_source(patched / USER_OWN) != own:
        raise SystemExit(f"a built-in changes {USER_OWN} on {VERSION}: pick another USER_OWN")
    stacked = read_source(patched / USER_STACKED)
    write_user_patch(
        root,
        USER_PATCH,
        [
            (USER_STACKED, stacked, synthetic_edit(stacked, USER_PATCH)),
            (USER_OWN, own, synthetic_edit(own, USER_PATCH)),
        ],
    )


def growth_tree() -> tuple[Path, list[str]]:
    """A pristine tree of VERSION: the built-ins' files plus modules under GROWTH_UNDER; (the
    tree, the max(GROWTH_SIZES) modules the synthetic patches edit, by name)."""
    builtin = load_catalogue().all_paths()
    record = sources.fetch_release(VERSION, builtin) / f"vllm-{VERSION}.dist-info" / "RECORD"
    sizes = {}
    with record.open(newline="") as fh:
        for rel, _, size in csv.reader(fh):
            sizes[rel] = int(size) if size.isdigit() else 0
    wanted = max(GROWTH_SIZES)
    picked = [
        rel
        for rel in sorted(sizes)
        if rel.startswith(GROWTH_UNDER)
        and rel.endswith(".py")
        and "/" not in rel[len(GROWTH_UNDER) :]
        and rel not in builtin
        and sizes[rel] >= GROWTH_MIN_BYTES
    ][: wanted + 10]  # a few spare for files a diff cannot take (no final newline, CRLF)
    tree = sources.fetch_release(
        VERSION,
        [*builtin, *picked],
        cache=sources.cache_root() / GROWTH_CACHE,
        say=lambda note: print(f"growth tree: {fetch_line(note)}", file=sys.stderr),
    )
    usable = []
    for rel in picked:
        data = (tree / rel).read_bytes()
        if data.endswith(b"\n") and b"\r" not in data:
            usable.append(rel)
    if len(usable) < wanted:
        raise SystemExit(f"only {len(usable)} usable modules under {GROWTH_UNDER} in {tree}")
    return tree, usable[:wanted]


@dataclass
class GrowthRow:
    variant: str
    patches: int
    files: int
    bytes_touched: int
    status: Figure
    apply: Figure


def growth(
    tool: list[str], floor: list[str], repeat: int, tree: Path, modules: list[str], work: Path
) -> list[GrowthRow]:
    """status and apply with the built-ins plus N synthetic user patches, for each N in
    GROWTH_SIZES: each patch on a module of its own, then all N as a series on one module."""
    counter = iter(range(10**6))

    def copy() -> Path:
        dest = work / f"tree-{next(counter)}"
        shutil.copytree(tree, dest)
        return dest

    def row(variant: str, folder: Path | None, n: int, touched: list[str]) -> GrowthRow:
        given = ["--patches", str(folder)] if folder else []
        applied = copy()
        subprocess.run(
            [*tool, "--target", str(applied), *given, "apply"], check=True, capture_output=True
        )
        status = measure(
            f"status, {variant}, N={n}",
            repeat,
            dict,
            lambda c: [*tool, "--target", str(applied), *given, "status"],
            floor=floor,
        )
        apply = measure(
            f"apply, {variant}, N={n}",
            repeat,
            lambda: {"site": copy()},
            lambda c: [*tool, "--target", str(c["site"]), *given, "apply"],
            floor=floor,
        )
        files = sorted(set(touched))
        size = sum((tree / rel).stat().st_size for rel in files)
        return GrowthRow(variant, n, len(files), size, status, apply)

    rows = [row("built-ins only", None, 0, [])]
    for n in GROWTH_SIZES:
        folder = work / f"patches-files-{n}"
        for i, rel in enumerate(modules[:n]):
            text = read_source(tree / rel)
            name = f"synth-{i:03d}"
            write_user_patch(folder, name, [(rel, text, synthetic_edit(text, name))])
        rows.append(row("different files", folder, n, modules[:n]))
    biggest = max(modules, key=lambda rel: (tree / rel).stat().st_size)
    for n in GROWTH_SIZES:
        folder = work / f"patches-series-{n}"
        text = read_source(tree / biggest)
        for i in range(n):  # names sort in series order; each diff made on the one before
            name = f"synth-{i:03d}"
            after = synthetic_edit(text, name)
            write_user_patch(folder, name, [(biggest, text, after)])
            text = after
        rows.append(row(f"one file ({Path(biggest).name}), series", folder, n, [biggest]))
    return rows


def above_floor(fig: Figure) -> float:
    """Median of each run less the start-up floor run paired with it."""
    return statistics.median(
        s.seconds - f.seconds for s, f in zip(fig.samples, fig.floor, strict=True)
    )


def growth_report(rows: list[GrowthRow], repeat: int) -> None:
    base = rows[0]
    print()
    print(
        f"Growth: built-ins plus N synthetic user patches (a comment line first and last) on a "
        f"pristine {VERSION} tree, {repeat} runs each; '+' is the median above the paired "
        "start-up run, less the same for N=0, i.e. what the user patches add, and that per MB "
        "of the files they touch and per patch; no target."
    )
    header = (
        "variant",
        "N",
        "files",
        "bytes touched",
        "status",
        "apply",
        "status +",
        "apply +",
        "status + / MB",
        "apply + / MB",
        "status + / patch",
        "apply + / patch",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        extra = [above_floor(r.status) - above_floor(base.status)]
        extra.append(above_floor(r.apply) - above_floor(base.apply))
        mb = r.bytes_touched / 1e6
        cells = [
            r.variant,
            str(r.patches),
            str(r.files),
            f"{r.bytes_touched / 1000:,.0f} kB",
            f"{fmt(r.status.median)} ({r.status.spread})",
            f"{fmt(r.apply.median)} ({r.apply.spread})",
        ]
        if r is base:
            cells += ["-"] * 6
        else:
            cells += [f"{x * 1000:+.0f} ms" for x in extra]
            cells += [f"{x * 1000 / mb:+.0f} ms" for x in extra]
            cells += [f"{x * 1000 / r.patches:+.1f} ms" for x in extra]
        print("| " + " | ".join(cells) + " |")


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


def _build_tool_venv(venv: Path, key: str) -> str:
    """(Re)install the tool into ``venv`` unless its stamp matches ``key``; what was done.

    Reused while the hash of the packaged files matches; otherwise `pip install .` again (which
    reinstalls the tool and adds only missing dependencies). It is built from a clean copy of
    the packaged files, so no stale `build/` of setuptools can slip old modules in. The caller
    holds the venv's lock exclusively.
    """
    stamp = venv / ".bench-key"
    python, script = venv / "bin" / "python", venv / "bin" / "vllm-patcher"
    if stamp.exists() and stamp.read_text() == key and script.exists():
        return f"reused (key {key[:12]})"
    start = time.perf_counter()
    made_by = venv / ".bench-interpreter"
    created = not (
        python.exists() and made_by.exists() and made_by.read_text() == interpreter_key()
    )
    if created:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        made_by.write_text(interpreter_key())
    stamp.unlink(missing_ok=True)  # a failed install must not look current
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
    return f"{how} from {REPO} in {time.perf_counter() - start:.0f} s (key {key[:12]})"


@contextlib.contextmanager
def tool_venv(cache: Path) -> Iterator[tuple[Path, str]]:
    """A venv holding only vllm-patcher and its dependencies, held for the whole run.

    Building takes ``<cache>/bench-tool-venv.lock`` exclusively; measuring holds it shared, so
    another bench run (of other code: another checkout) waits to reinstall the venv until this
    one is done, and this one waits for a build in progress. Yields (its directory, what was
    done).
    """
    venv = cache / TOOL_VENV_NAME
    key = tool_inputs_key()
    lock_path = cache / f"{TOOL_VENV_NAME}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as fh:
        try:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"waiting for {lock_path}: another bench run is using the tool venv")
                fcntl.flock(fh, fcntl.LOCK_EX)
            while True:
                how = _build_tool_venv(venv, key)
                # Downgrading is not atomic: another run may rebuild in between, so check again.
                fcntl.flock(fh, fcntl.LOCK_SH)
                stamp = venv / ".bench-key"
                if stamp.is_file() and stamp.read_text() == key:
                    break
                fcntl.flock(fh, fcntl.LOCK_EX)
            yield venv, how
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
    imported = Path(sources.__file__).resolve().parents[2]
    if imported != REPO:
        raise SystemExit(
            f"bench/run.py imports vllm_patcher from {imported}, not from {REPO}: "
            f"run it with PYTHONPATH={REPO} (or the dev venv of this checkout)"
        )
    growth_src = growth_tree()  # may download the wheel once: before taking the venv's lock
    with tool_venv(sources.cache_root()) as (tool_dir, tool_how):
        run(args, tool_dir, tool_how, growth_src)


def run(
    args: argparse.Namespace, tool_dir: Path, tool_how: str, growth_src: tuple[Path, list[str]]
) -> None:
    repeat = args.repeat
    pristine = sources.fetch_release(VERSION, [*load_catalogue().all_paths(), USER_OWN])
    venv_dir = Path(
        os.environ.get("VLLM_PATCHER_TEST_VENV", sources.cache_root() / f"venv-{VERSION}")
    )
    venv_python = venv_dir / "bin" / "python"
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
    # one patch of the user's own: a file stacked on a built-in's, and a file of its own
    user = work / "user-patches"
    make_user_patch(user, pristine, fresh(patched=True))
    figures["apply_user"] = measure(
        "apply (built-ins + 1 user patch)",
        repeat,
        tree(),
        lambda c: [*tool, "--target", str(c["site"]), "--patches", str(user), "apply"],
        floor=floor,
    )
    user_site = fresh()
    subprocess.run(
        [*tool, "--target", str(user_site), "--patches", str(user), "apply"],
        check=True,
        capture_output=True,
    )
    figures["status_user"] = measure(
        "status (built-ins + 1 user patch)",
        repeat,
        dict,
        lambda c: [*tool, "--target", str(user_site), "--patches", str(user), "status"],
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

    growth_rows = growth(tool, floor, repeat, *growth_src, work / "growth")

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
    report(figures, repeat, heavy, real_venv, fetch_rows())
    growth_report(growth_rows, repeat)


FETCH_RUNS = 3  # range fetches from the real index: few, to be polite to it
FETCH_MAX_BYTES = 2_000_000
FETCH_MAX_SECONDS = 1.0


def fetch_rows(runs: int = FETCH_RUNS) -> list[tuple[str, str, str, str, str, str]]:
    """Range fetch of VERSION's touched files from PyPI (proxy and cert settings as configured),
    each run into a fresh folder: bytes and seconds per release against their targets. No
    network: one row that says so."""
    from vllm_patcher.wheels import fetch, index

    name = f"range fetch of {VERSION}'s touched files (PyPI)"
    members = load_catalogue().all_paths()
    config = index.index_config()
    config = index.IndexConfig((index.PYPI_SIMPLE,), "bench", config.cert, config.trusted_hosts)
    runs_stats = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
            try:
                stats = fetch.fetch_members(
                    VERSION, members, Path(tmp) / "tree", Path(tmp) / "wheels", config=config
                )
            except fetch.FetchError as exc:
                return [(name, "skipped: no network", "-", exc.message[:80], "-", "-")]
        runs_stats.append(stats)
    seconds = [st.seconds for st in runs_stats]
    most = max(st.bytes for st in runs_stats)
    median = statistics.median(seconds)
    how = f"{runs_stats[0].requests} requests, {len(members)} files ({runs_stats[0].method})"
    return [
        (
            name + ": bytes",
            f"{most / 1e6:.2f} MB",
            "-",
            how,
            f"<= {FETCH_MAX_BYTES / 1e6:g} MB",
            "met" if most <= FETCH_MAX_BYTES else "NOT MET",
        ),
        (
            name + ": time",
            fmt(median),
            f"{fmt(min(seconds))}-{fmt(max(seconds))}",
            "-",
            f"<= {FETCH_MAX_SECONDS:g} s",
            "met" if median <= FETCH_MAX_SECONDS else "NOT MET",
        ),
    ]


def report(
    f: dict[str, Figure],
    repeat: int,
    heavy: int,
    real_venv: str,
    fetched: list[tuple[str, str, str, str, str, str]] | None = None,
) -> None:
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(key: str, ratio: float | None, against: str, target: float | None) -> None:
        fig = f[key]
        met = "-" if target is None or ratio is None else ("met" if ratio <= target else "NOT MET")
        r = "-" if ratio is None else f"{ratio:.2f} x {against}"
        t = "-" if target is None else f"<= {target:g} x"
        rows.append((fig.name, fmt(fig.median), fig.spread, r, t, met))

    def wall_row(key: str, limit: float) -> None:
        fig = f[key]
        met = "met" if fig.median <= limit else "NOT MET"
        rows.append((fig.name, fmt(fig.median), fig.spread, "-", f"<= {fmt(limit)} wall", met))

    row("startup", None, "", None)
    row("apply_pinned", f["apply_pinned"].median / f["git_apply"].median, "git apply", None)
    row("apply_user", None, "", None)
    row("apply_transform", None, "", None)
    row("git_apply", None, "", None)
    wall_row("status", STATUS_MAX_SECONDS)
    wall_row("status_user", STATUS_MAX_SECONDS)
    row("revert", None, "", None)
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
        ("apply_user", "peak RSS apply (built-ins + 1 user patch)"),
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

    rows.extend(fetched or [])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"vllm-patcher bench, vLLM {VERSION}, {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {os.cpu_count()} cores (load {load}), "
        f"Python {platform.python_version()}, {repeat} runs ({heavy} for verify and bare import); "
        f"the start-up bound: status <= {fmt(STATUS_MAX_SECONDS)} wall"
    )
    header = ("figure", "median", "spread", "ratio", "target", "")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
