"""Crash safety and concurrency, on real pristine 0.15.1 trees through the real command line.

Kills and races are placed with the tool's own fault hook (``VLLM_PATCHER_FAULT``): a run stops
at the Nth point of its transaction (lock taken, survey done, plan made, before and after every
write, after every journal save) and the test kills it there, interrupts it, or lets another run
start while it waits. Nothing depends on how fast this machine happens to be.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher import fileops
from vllm_patcher.catalogue.model import Catalogue
from vllm_patcher.errors import PatcherError
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.install.record import file_hash
from vllm_patcher.patching import status as status_mod
from vllm_patcher.patching import txn

from ..conftest import (
    CATALOGUE,
    REPO,
    UNPINNED,
    record_of,
    run_cli,
    scratch_tree,
    snapshot,
    states_on,
    touched_files,
)

VERSION = "0.15.1"
EMPTY_PINS = UNPINNED["VLLM_PATCHER_PATCHES_DIR"]


class Trees:
    """Pristine and patched templates of one release, and the hashes of both.

    ``only``: the catalogue cut to these patches (pinned and unpinned), for the tool's runs
    (``env``, ``unpinned``) and the in-process checks (``catalogue``) alike."""

    def __init__(self, root: Path, only: tuple[str, ...] | None = None) -> None:
        self.catalogue, self.env, self.unpinned = CATALOGUE, {}, UNPINNED
        if only is not None:
            self.catalogue = Catalogue(tuple(p for p in CATALOGUE.patches if p.name in only))
            self.env = {
                "VLLM_PATCHER_PATCHES_DIR": str(_cut(REPO / "patches", root / "pins", only))
            }
            unpinned = _cut(Path(EMPTY_PINS), root / "unpinned", only)
            self.unpinned = {"VLLM_PATCHER_PATCHES_DIR": str(unpinned)}
        self.pristine = root / "pristine"
        scratch_tree(VERSION, self.pristine)
        self.patched = root / "patched"
        shutil.copytree(self.pristine, self.patched)
        run_cli("--target", str(self.patched), "apply", env=self.env, check=True)
        self.record = record_of(self.pristine)
        self.rels = touched_files(self.record, VERSION, self.catalogue)
        self.before = {r: file_hash((self.pristine / r).read_bytes()) for r in self.rels}
        self.after = {r: file_hash((self.patched / r).read_bytes()) for r in self.rels}
        assert self.before == {r: self.record[r] for r in self.rels}  # pristine = RECORD
        # the stacking scenario starts from the DeepSeek/Kimi codemods alone (the families stack
        # on top of them in the allow-list file)
        self.by_transform = by_transform = root / "by-transform"
        shutil.copytree(self.pristine, by_transform)
        first = ("eagle3-whitelist", "kimi-k25-image-token", "supports-eagle3")
        run_cli("--target", str(by_transform), "apply", *first, env=self.unpinned, check=True)
        # the files as those three left them, with no narrower choice recorded: the scenario's
        # bare apply grows every series (a recorded choice would keep it to those three)
        (by_transform / ".vllm-patcher" / "chosen.json").unlink()
        self.after_codemods = {r: file_hash((by_transform / r).read_bytes()) for r in self.rels}

    def patched_hashes(self, rel: str) -> tuple[str, str]:
        return self.after[rel], self.after_codemods[rel]

    def current(self, site: Path) -> dict[str, str]:
        return {r: file_hash((site / r).read_bytes()) for r in self.rels}


def _cut(patches: Path, dest: Path, only: tuple[str, ...]) -> Path:
    """A copy of the patches folder ``patches`` holding only ``only`` (its series cut alike)."""
    shutil.copytree(patches, dest, ignore=shutil.ignore_patterns("__pycache__"))
    names = [n for n in (dest / "series").read_text().splitlines() if n and n[0] != "#"]
    for name in names:
        if name not in only:
            shutil.rmtree(dest / name)
    (dest / "series").write_text("".join(f"{n}\n" for n in names if n in only))
    return dest


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Trees:
    return Trees(tmp_path_factory.mktemp("templates"))


# the kill test's catalogue: the DeepSeek/Kimi codemods, MiniMax-M2 stacked on their allow-list
# file, and two families (Granite's model file, Mistral's allow-list clause): every kind of step
# (pinned diff, transform, a file several patches share, a file of its own) at every point, in
# half the runs the whole catalogue (12 files on 0.15.1) takes
KILL_SET = (
    "eagle3-whitelist",
    "kimi-k25-image-token",
    "supports-eagle3",
    "eagle3-minimax-m2",
    "eagle3-granite",
    "eagle3-mistral",
)


@pytest.fixture(scope="module")
def kill_trees(tmp_path_factory: pytest.TempPathFactory) -> Trees:
    return Trees(tmp_path_factory.mktemp("kill-templates"), only=KILL_SET)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """One tool process, optionally stopped at a fault point."""

    def __init__(
        self,
        site: Path,
        *args: str,
        fault: str | None = None,
        fault_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        full = dict(os.environ)
        full.pop("VLLM_PATCHER_PATCHES_DIR", None)
        if fault:
            assert fault_dir is not None
            full.update({"VLLM_PATCHER_FAULT": fault, "VLLM_PATCHER_FAULT_DIR": str(fault_dir)})
        full.update(env or {})
        self.fault_dir = fault_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_patcher", "--target", str(site), *args],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A shell runs background jobs with SIGINT ignored, and children inherit that; the
            # tool must see Ctrl-C the way a terminal delivers it.
            preexec_fn=_default_sigint,
        )

    def reached(self, timeout: float = 120) -> bool:
        """Wait until the run stops at its fault point (True) or exits without reaching it."""
        assert self.fault_dir is not None
        marker = self.fault_dir / f"reached-{self.proc.pid}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists():
                return True
            if self.proc.poll() is not None:
                return marker.exists()
            time.sleep(0.005)
        raise AssertionError("the run neither reached its fault point nor exited")

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def is_waiting(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def fault_dir(tmp_path: Path) -> Path:
    d = tmp_path / "faults"
    d.mkdir()
    return d


def check_truthful(site: Path, t: Trees) -> list[str]:
    """Every file pristine or patched, and status (the object the CLI renders) agrees.

    In-process, so the hundreds of kill runs cost one process each, not four.
    """
    problems = []
    current = t.current(site)
    for rel, h in current.items():
        if h != t.before[rel] and h not in t.patched_hashes(rel):
            problems.append(f"{rel} is neither pristine nor patched")
    try:
        st = status_mod.read_status(
            locate_in_directory(str(site), CATALOGUE), t.catalogue
        ).to_dict()
    except PatcherError as exc:
        return [*problems, f"status refused: {exc.message}"]
    for f in st["files"]:  # type: ignore[attr-defined]
        if f["sha256"] != current[f["path"]]:
            problems.append(f"status reports a wrong hash for {f['path']}")
    for p in st["patches"]:  # type: ignore[attr-defined]
        files = p["files"]
        if p["state"] == "applied" and any(current[r] not in t.patched_hashes(r) for r in files):
            problems.append(f"status says {p['name']} applied but a file is not patched")
        # pending: pristine, or carrying only the patches below it in the series
        below = (t.before, t.after_codemods)
        if p["state"] == "pending" and any(current[r] not in (b[r] for b in below) for r in files):
            problems.append(f"status says {p['name']} pending but a file is patched")
        reinstalled = all(
            f["state"] in ("reinstalled", "applied")
            for f in st["files"]  # type: ignore[attr-defined]
            if f["patch"] == p["name"]
        )
        if p["state"] == "drifted" and st["interrupted"] is None and not reinstalled:
            problems.append(f"{p['name']} drifted without an interrupted run to explain it")
    for f in st["files"]:  # type: ignore[attr-defined]
        rel = f["path"]
        want = {"applied": t.patched_hashes(rel), "reinstalled": (t.before[rel],)}.get(f["state"])
        if want is not None and current[rel] not in want:
            problems.append(f"status calls {f['path']} {f['state']} but its bytes are not")
    if st["in_progress"]:
        problems.append("status says a run is in progress after every run ended")
    return problems


def check_recovers(site: Path, t: Trees) -> list[str]:
    """The next apply, then revert, bring the tree to patched, then to RECORD bytes."""
    problems = []
    try:
        txn.apply(locate_in_directory(str(site), CATALOGUE), t.catalogue)
    except PatcherError as exc:
        return [f"apply after the kill failed: {exc.message}"]
    if t.current(site) != t.after:
        problems.append("apply after the kill did not patch every file")
    try:
        txn.revert(locate_in_directory(str(site), CATALOGUE))
    except PatcherError as exc:
        return [*problems, f"revert after the kill failed: {exc.message}"]
    if t.current(site) != t.before:
        problems.append("revert did not restore RECORD bytes")
    state_dir = site / ".vllm-patcher"
    leftovers = [str(p) for p in site.rglob(f"*{fileops.TMP_SUFFIX}")]
    leftovers += [str(p) for p in state_dir.rglob("*") if p.is_file() and p.name != "lock"]
    if leftovers:
        problems.append(f"left behind after revert: {leftovers}")
    if not (state_dir / "lock").is_file():
        problems.append("the lock file was removed")
    return problems


# --- kills at every point of every transaction --------------------------------------------------

# (name, template, arguments, unpinned): the transactions the kill test walks through (unpinned:
# the codemods' folders without pins, so every step goes through the libcst transforms)
SCENARIOS = (
    ("apply (pinned diff)", "pristine", ("apply",), False),
    ("apply (libcst transform)", "pristine", ("apply",), True),
    ("revert", "patched", ("revert",), False),
    ("apply over a reinstalled tree", "reinstalled", ("apply",), False),
    ("revert of a reinstalled tree", "reinstalled", ("revert",), False),
    # a series grows: eagle3-minimax-m2 stacked on files the codemods already patched
    ("apply stacking on applied files", "codemods", ("apply",), False),
)


def _prepare(t: Trees, template: str, site: Path) -> None:
    if template == "reinstalled":  # applied, then `pip install --force-reinstall` of two files
        shutil.copytree(t.patched, site)
        for rel in t.rels[:2]:
            shutil.copyfile(t.pristine / rel, site / rel)
    elif template == "codemods":
        shutil.copytree(t.by_transform, site)
    else:
        shutil.copytree(t.pristine if template == "pristine" else t.patched, site)


def test_sigkill_at_every_point_of_apply_and_revert_never_breaks_the_tree(
    kill_trees: Trees, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every fault point of every scenario: the run is killed there; at every other point the
    next run (a recovery) is killed too, at a point of its own. Then the tree must be truthful
    (status agrees with the bytes) and recover (apply, revert: patched, then RECORD bytes)."""
    t = kill_trees
    kills = runs = 0
    violations: list[str] = []
    per_scenario: dict[str, int] = {}
    twice = 0
    for name, template, args, unpinned in SCENARIOS:
        env = t.unpinned if unpinned else t.env
        point = 0
        while True:
            point += 1
            runs += 1
            site = tmp_path / f"run-{runs}"
            faults = tmp_path / f"faults-{runs}"
            faults.mkdir()
            _prepare(t, template, site)
            run = Run(site, *args, fault=f"stop@any#{point}", fault_dir=faults, env=env)
            if not run.reached():
                code, _, err = run.finish()
                assert code == 0, (name, err)
                shutil.rmtree(site)
                break
            run.proc.send_signal(signal.SIGKILL)
            run.finish()
            kills += 1
            per_scenario[name] = per_scenario.get(name, 0) + 1
            if point % 2 == 0:  # the recovery dies too
                again = Run(site, "apply", fault=f"stop@any#{point % 7 + 1}", fault_dir=faults,
                            env=t.env)  # fmt: skip
                if again.reached():
                    again.proc.send_signal(signal.SIGKILL)
                    kills += 1
                    twice += 1
                again.finish()
            found = check_truthful(site, t) + check_recovers(site, t)
            violations += [f"{name}, killed at point {point}: {v}" for v in found]
            shutil.rmtree(site)
    with capsys.disabled():
        print(
            f"\n[crash-safety] {runs} runs, {kills} SIGKILLs placed at every fault point "
            f"({per_scenario}; {twice} recoveries killed too), {len(violations)} violations"
        )
    assert not violations, violations[:10]
    assert min(per_scenario.values()) >= 10
    assert twice >= len(SCENARIOS) * 5


def test_ctrl_c_at_any_point_rolls_back_and_exits_130(trees: Trees, tmp_path: Path) -> None:
    for template, args in (("pristine", ("apply",)), ("patched", ("revert",))):
        point = 0
        while True:
            point += 1
            site = tmp_path / f"{args[0]}-{point}"
            _prepare(trees, template, site)
            before = snapshot(site)
            run = Run(site, *args, env={"VLLM_PATCHER_FAULT": f"interrupt@any#{point}"})
            code, _, err = run.finish()
            if code == 0:
                break  # past the last point: the run completed
            assert code == 130, (args, point, err)
            assert "interrupted" in err and "Traceback" not in err
            assert snapshot(site) == before, f"{args[0]} interrupted at point {point} changed files"
            shutil.rmtree(site)
        assert point > 10, "too few points to prove anything"


# --- races, placed deterministically ------------------------------------------------------------


def test_a_run_waiting_on_the_lock_never_refuses_what_the_holder_wrote(
    trees: Trees, tmp_path: Path, fault_dir: Path
) -> None:
    """The false refusal: a second apply used to judge files before taking the lock."""
    site = tmp_path / "site"
    shutil.copytree(trees.pristine, site)
    holder = Run(site, "apply", fault="pause@replaced#6", fault_dir=fault_dir)  # mid-write
    assert holder.reached()
    waiter = Run(site, "apply")
    time.sleep(0.5)
    assert waiter.is_waiting(), "the second apply did not wait for the lock"
    (fault_dir / "resume").touch()
    assert holder.finish()[0] == 0
    code, out, err = waiter.finish()
    assert code == 0, err
    assert "nothing to do" in out
    assert trees.current(site) == trees.after


def test_a_plan_is_never_made_from_bytes_another_run_is_changing(
    trees: Trees, tmp_path: Path, fault_dir: Path
) -> None:
    """The stale plan: an apply racing a revert used to patch only part of the files."""
    site = tmp_path / "site"
    shutil.copytree(trees.patched, site)
    reverting = Run(site, "revert", fault="pause@planned", fault_dir=fault_dir)
    assert reverting.reached()
    applying = Run(site, "apply")
    status = run_cli("--target", str(site), "--json", "status")
    assert status.returncode == 0
    assert json.loads(status.stdout)["in_progress"] is True
    time.sleep(0.3)
    assert applying.is_waiting()
    (fault_dir / "resume").touch()
    assert reverting.finish()[0] == 0
    code, out, err = applying.finish()
    assert code == 0, err
    assert trees.current(site) == trees.after, "not every file was patched"
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert [p["state"] for p in st["patches"]] == states_on("0.15.1", "applied")


def test_an_interrupted_first_apply_never_deletes_state_a_waiting_run_needs(
    trees: Trees, tmp_path: Path, fault_dir: Path
) -> None:
    site = tmp_path / "site"
    shutil.copytree(trees.pristine, site)
    first = Run(site, "apply", fault="pause@journal#1", fault_dir=fault_dir)
    assert first.reached()
    lock = site / ".vllm-patcher" / "lock"
    inode = lock.stat().st_ino
    second = Run(site, "apply")
    time.sleep(0.3)
    first.proc.send_signal(signal.SIGINT)  # Ctrl-C while paused in the write phase
    code, _, err = first.finish()
    assert code == 130, err
    code, _, err = second.finish()
    assert code == 0, err
    assert lock.stat().st_ino == inode, "the lock file was replaced under a waiting run"
    assert trees.current(site) == trees.after
    copies = site / ".vllm-patcher" / "pristine"
    assert sorted(p.relative_to(copies).as_posix() for p in copies.rglob("*.py")) == sorted(
        trees.rels
    )
    assert run_cli("--target", str(site), "revert").returncode == 0
    assert trees.current(site) == trees.before


def test_a_waiter_that_times_out_leaves_the_holder_intact(
    trees: Trees, tmp_path: Path, fault_dir: Path
) -> None:
    site = tmp_path / "site"
    shutil.copytree(trees.pristine, site)
    holder = Run(site, "apply", fault="pause@journal#1", fault_dir=fault_dir)
    assert holder.reached()
    for args in (("apply",), ("apply", "--dry-run"), ("revert",)):
        proc = run_cli("--target", str(site), *args, env={"VLLM_PATCHER_LOCK_TIMEOUT": "0.3"})
        assert proc.returncode == 8, (args, proc.stderr)
        assert "another vllm-patcher" in proc.stderr
    status = run_cli("--target", str(site), "--json", "status")
    assert status.returncode == 0 and json.loads(status.stdout)["in_progress"] is True
    (fault_dir / "resume").touch()
    assert holder.finish()[0] == 0
    assert (site / ".vllm-patcher" / "state.json").is_file()
    assert trees.current(site) == trees.after
    assert run_cli("--target", str(site), "revert").returncode == 0
    assert trees.current(site) == trees.before


def idle_cores(seconds: float = 1.0) -> int:
    """The cores this machine leaves idle now: the idle share of every CPU's time over ``seconds``
    (/proc/stat), in whole cores, rounded to the nearest; every core where /proc/stat is not
    readable."""
    cores = os.cpu_count() or 2

    def idle_and_total() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    try:
        idle0, total0 = idle_and_total()
        time.sleep(seconds)
        idle1, total1 = idle_and_total()
    except (OSError, ValueError, IndexError):
        return cores
    share = (idle1 - idle0) / max(1, total1 - total0)
    return min(cores, round(share * cores))


@pytest.fixture
def busy_cpus() -> Iterator[int]:
    """Load every core, as on the busy CI machine where the false refusal was first seen: a busy
    loop for each core the machine leaves idle (yields how many). Under `make test` the engine
    lanes beside this one, or a loaded host, keep the cores busy already, and a loop more would
    only take CPU from them."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(idle_cores())
    ]
    try:
        yield len(loops)
    finally:
        for p in loops:
            p.kill()
            p.wait()


def test_concurrent_applies_and_reverts_on_busy_cpus_never_refuse_or_mix(
    trees: Trees, tmp_path: Path, busy_cpus: int, capsys: pytest.CaptureFixture[str]
) -> None:
    refusals: list[str] = []
    mixed = 0
    runs = 0
    rounds = 40
    for round_ in range(rounds):
        site = tmp_path / f"round-{round_}"
        shutil.copytree(trees.pristine if round_ % 2 == 0 else trees.patched, site)
        ops = ["apply", "revert", "apply", "revert", "apply", "apply"]
        if round_ % 4 == 0:
            ops = ["apply"] * 6
        procs = [Run(site, op) for op in ops]
        for op, run in zip(ops, procs, strict=True):
            code, _, err = run.finish()
            runs += 1
            if code != 0:
                refusals.append(f"round {round_} {op}: exit {code}: {err.strip()}")
        current = trees.current(site)
        all_patched = current == trees.after
        if not all_patched and current != trees.before:
            mixed += 1
        st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
        state = "applied" if all_patched else "pending"
        assert [p["state"] for p in st["patches"]] == states_on(VERSION, state)
        assert (site / ".vllm-patcher" / "state.json").exists() == all_patched
        shutil.rmtree(site)
    with capsys.disabled():
        print(
            f"\n[stress] {runs} concurrent runs in {rounds} rounds of 6 on busy CPUs "
            f"({busy_cpus} busy loops for the idle cores of {os.cpu_count()}): "
            f"{len(refusals)} refusals, {mixed} mixed end states"
        )
    assert not refusals, refusals[:5]
    assert mixed == 0


def test_a_held_lock_times_out_with_a_clear_message(trees: Trees, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(trees.pristine, site)
    lock_dir = site / ".vllm-patcher"
    lock_dir.mkdir()
    (lock_dir / "lock").touch()
    before = snapshot(site)
    with open(lock_dir / "lock", "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = run_cli("--target", str(site), "apply", env={"VLLM_PATCHER_LOCK_TIMEOUT": "0.5"})
    assert proc.returncode == 8
    assert "another vllm-patcher" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(site) == before


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_an_unusable_lock_timeout_is_a_usage_error(
    trees: Trees, tmp_path: Path, value: str
) -> None:
    """Every command refuses it, not only the ones that happen to wait."""
    site = tmp_path / "site"
    shutil.copytree(trees.pristine, site)
    before = snapshot(site)
    for command in ("apply", "status", "revert", "verify"):
        proc = run_cli("--target", str(site), command, env={"VLLM_PATCHER_LOCK_TIMEOUT": value})
        assert proc.returncode == 2, (command, proc.stderr)
        assert "VLLM_PATCHER_LOCK_TIMEOUT" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(site) == before


def test_rewrite_after_apply_is_drift_and_apply_heals_it(trees: Trees, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(trees.patched, site)
    # what `pip install --force-reinstall vllm` does to the touched files
    for rel in trees.rels:
        shutil.copyfile(trees.pristine / rel, site / rel)
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert [p["state"] for p in st["patches"]] == states_on("0.15.1", "drifted")
    run_cli("--target", str(site), "apply", check=True)
    assert trees.current(site) == trees.after
    # and a revert after a reinstall never writes stale copies over the reinstalled files
    for rel in trees.rels:
        shutil.copyfile(trees.pristine / rel, site / rel)
    out = json.loads(run_cli("--target", str(site), "--json", "revert", check=True).stdout)
    assert out["restored"] == [] and sorted(out["already_pristine"]) == sorted(trees.rels)
    assert not (site / ".vllm-patcher" / "state.json").exists()


def test_revert_force_after_an_interrupted_apply_keeps_the_users_edit(
    trees: Trees, tmp_path: Path, fault_dir: Path
) -> None:
    """An apply killed mid-run, then the user edits a file it had patched: plain revert refuses
    and offers `revert --force` as the one that keeps a copy; the forced one does keep it."""
    site = tmp_path / "site"
    _prepare(trees, "pristine", site)
    run = Run(site, "apply", fault="stop@journal#1", fault_dir=fault_dir)
    assert run.reached()
    run.proc.kill()
    run.finish()
    assert json.loads((site / ".vllm-patcher" / "state.json").read_text())["phase"] != "done"
    rel = "vllm/config/speculative.py"
    edited = site / rel
    edited.write_bytes(edited.read_bytes() + b"# MY EDIT, made after the interrupted apply\n")
    mine = edited.read_bytes()
    refused = run_cli("--target", str(site), "revert")
    assert refused.returncode == 5 and "keep" in refused.stderr and str(edited) in refused.stderr
    forced = run_cli("--target", str(site), "--json", "revert", "--force", check=True)
    result = json.loads(forced.stdout)
    assert rel in result["recovered"], result
    assert Path(result["saved_edits"][rel]).read_bytes() == mine, result
    assert trees.current(site) == trees.before
    assert not (site / ".vllm-patcher" / "state.json").exists()
    # the same in text: why it was restored, and where the edit went
    _prepare(trees, "pristine", site2 := tmp_path / "site2")
    again = Run(site2, "apply", fault="stop@journal#1", fault_dir=fault_dir)
    assert again.reached()
    again.proc.kill()
    again.finish()
    (site2 / rel).write_bytes(mine)
    text = run_cli("--target", str(site2), "revert", "--force", check=True).stdout
    assert f"restored {rel} (an interrupted run had left it, and it was edited since)" in text
    where = text.split(f"your edited {rel} was kept at ", 1)[1].splitlines()[0]
    assert Path(where).read_bytes() == mine, text


@pytest.mark.parametrize("where", ["after-apply", "after-an-interrupted-apply"])
def test_a_forced_revert_stopped_part_way_leaves_every_file_and_no_copy_behind(
    trees: Trees, tmp_path: Path, fault_dir: Path, where: str
) -> None:
    """Ctrl-C or a full disk at each write of `revert --force` over an edit: exit 130 or 6 and
    every file as it was, the edit in its file (so no copy of it is left unnamed in saved/); the
    next forced revert keeps the edit and names where."""
    rel = "vllm/config/speculative.py"
    n = 0
    while True:
        n += 1
        site = tmp_path / f"{where}-{n}"
        if where == "after-apply":
            _prepare(trees, "patched", site)
        else:  # killed with some files patched: recovery rewrites several files
            _prepare(trees, "pristine", site)
            # past the saved copies (one a file) and the journal: a few files replaced
            stop = f"stop@replaced#{len(trees.rels) + 4}"
            run = Run(site, "apply", fault=stop, fault_dir=fault_dir)
            assert run.reached()
            run.proc.kill()
            run.finish()
            patched = [r for r, h in trees.current(site).items() if h != trees.before[r]]
            assert len(patched) >= 2 and rel in patched, patched
        (site / rel).write_bytes((site / rel).read_bytes() + b"# MY EDIT\n")
        mine = (site / rel).read_bytes()
        before = snapshot(site)
        fault = f"{'interrupt' if n % 2 else 'enospc'}@write#{n}"
        proc = run_cli(
            "--target", str(site), "revert", "--force", env={"VLLM_PATCHER_FAULT": fault}
        )
        if proc.returncode == 0:
            break  # past the last write
        assert proc.returncode in (6, 130) and "Traceback" not in proc.stderr, (fault, proc.stderr)
        assert snapshot(site) == before, f"{where}: {fault} changed files"
        forced = json.loads(
            run_cli("--target", str(site), "--json", "revert", "--force", check=True).stdout
        )
        assert Path(forced["saved_edits"][rel]).read_bytes() == mine, (fault, forced)
        assert trees.current(site) == trees.before
    assert n > 3, "too few writes to prove anything"
