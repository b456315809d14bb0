"""Crash safety and concurrency, on real pristine 0.15.1 trees through the real command line.

A run is SIGKILLed at random moments of apply and revert; afterwards every touched file must be
either the pristine or the patched bytes, ``status`` must describe the tree truthfully, and the
next apply and revert must bring it to a clean state (RECORD-identical after revert).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_patcher import catalog, sources, state
from vllm_patcher.target import file_hash

from .conftest import record_of, run_cli, snapshot

VERSION = "0.15.1"
KILLS = int(os.environ.get("VLLM_PATCHER_KILLS", "260"))
EMPTY_PINS = "/nonexistent-vllm-patcher-pins"


class Trees:
    """Pristine and patched templates of one release, and the hashes of both."""

    def __init__(self, root: Path) -> None:
        self.pristine = root / "pristine"
        shutil.copytree(sources.fetch_release(VERSION), self.pristine)
        self.patched = root / "patched"
        shutil.copytree(self.pristine, self.patched)
        run_cli("--target", str(self.patched), "apply", check=True)
        self.record = record_of(self.pristine)
        self.rels = catalog.touched_files(self.record)
        self.before = {r: file_hash((self.pristine / r).read_bytes()) for r in self.rels}
        self.after = {r: file_hash((self.patched / r).read_bytes()) for r in self.rels}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Trees:
    return Trees(tmp_path_factory.mktemp("templates"))


def tool(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_patcher", *args]


def check_truthful(site: Path, t: Trees) -> list[str]:
    """Every file pristine or patched; status exits 0 and agrees with the bytes on disk."""
    problems = []
    current = {r: file_hash((site / r).read_bytes()) for r in t.rels}
    for rel, h in current.items():
        if h not in (t.before[rel], t.after[rel]):
            problems.append(f"{rel} is neither pristine nor patched")
    proc = run_cli("--target", str(site), "--json", "status")
    if proc.returncode != 0:
        return [*problems, f"status exited {proc.returncode}: {proc.stderr.strip()}"]
    st = json.loads(proc.stdout)
    for f in st["files"]:
        if f["sha256"] != current[f["path"]]:
            problems.append(f"status reports a wrong hash for {f['path']}")
    for p in st["patches"]:
        files = p["files"]
        if p["state"] == "applied" and any(current[r] != t.after[r] for r in files):
            problems.append(f"status says {p['name']} applied but a file is not patched")
        if p["state"] == "pending" and any(current[r] != t.before[r] for r in files):
            problems.append(f"status says {p['name']} pending but a file is patched")
    if st["interrupted"] is None and any(p["state"] == "drifted" for p in st["patches"]):
        problems.append("drifted without an interrupted run to explain it")
    return problems


def check_recovers(site: Path, t: Trees) -> list[str]:
    problems = []
    if run_cli("--target", str(site), "apply").returncode != 0:
        return ["apply after the kill failed"]
    if any(file_hash((site / r).read_bytes()) != t.after[r] for r in t.rels):
        problems.append("apply after the kill did not patch every file")
    if run_cli("--target", str(site), "revert").returncode != 0:
        return [*problems, "revert after the kill failed"]
    if any(file_hash((site / r).read_bytes()) != t.record[r] for r in t.rels):
        problems.append("revert did not restore RECORD bytes")
    leftovers = [str(p) for p in site.rglob(f"*{state.TMP_SUFFIX}")]
    leftovers += [str(p) for p in (site / ".vllm-patcher").glob("pristine")]
    leftovers += [str(p) for p in (site / ".vllm-patcher").glob("state.json")]
    if leftovers:
        problems.append(f"left behind after revert: {leftovers}")
    return problems


def test_sigkill_during_apply_and_revert_never_breaks_the_tree(
    trees: Trees, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(20261129)
    kills = finished = 0
    violations: list[str] = []

    def start(i: int, operation: str, site: Path) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if i % 3 == 0:  # a third of the runs go through the slower libcst path
            env["VLLM_PATCHER_PATCHES_DIR"] = EMPTY_PINS
        if i % 3 == 1:  # another third slow every write down, so kills land inside the write phase
            env["VLLM_PATCHER_FAULT_DELAY"] = "0.01"
        return subprocess.Popen(
            tool("--target", str(site), operation),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # How long each kind of run takes uninterrupted, so kill times spread over the whole run.
    duration: dict[tuple[int, str], float] = {}
    for kind in range(3):
        for operation in ("apply", "revert"):
            site = tmp_path / f"timing-{kind}-{operation}"
            shutil.copytree(trees.pristine if operation == "apply" else trees.patched, site)
            began = time.perf_counter()
            assert start(kind, operation, site).wait() == 0
            duration[(kind, operation)] = time.perf_counter() - began
            shutil.rmtree(site)

    for i in range(KILLS):
        operation = "apply" if i % 2 == 0 else "revert"
        site = tmp_path / f"run-{i}"
        shutil.copytree(trees.pristine if operation == "apply" else trees.patched, site)
        proc = start(i, operation, site)
        time.sleep(rng.uniform(0.25, 1.0) * duration[(i % 3, operation)])
        proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        if code == -signal.SIGKILL:
            kills += 1
        else:
            finished += 1
        found = check_truthful(site, trees) + check_recovers(site, trees)
        violations += [f"run {i} ({operation}): {v}" for v in found]
        shutil.rmtree(site)
    with capsys.disabled():
        print(
            f"\n[crash-safety] {KILLS} runs: {kills} killed mid-run, {finished} finished first, "
            f"{len(violations)} violations"
        )
    assert not violations, violations[:10]
    assert kills >= min(200, KILLS * 0.8), "too few runs were actually killed to prove anything"


def test_concurrent_applies_and_reverts_serialise(
    trees: Trees, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(7)
    runs = 0
    for round_ in range(8):
        site = tmp_path / f"round-{round_}"
        shutil.copytree(trees.pristine, site)
        ops = (
            ["apply"] * 6
            if round_ % 2 == 0
            else [rng.choice(["apply", "revert"]) for _ in range(6)]
        )
        procs = [
            subprocess.Popen(
                tool("--target", str(site), op),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for op in ops
        ]
        for op, p in zip(ops, procs, strict=True):
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, (op, err)
        runs += len(procs)
        current = {r: file_hash((site / r).read_bytes()) for r in trees.rels}
        all_patched = current == trees.after
        assert all_patched or current == trees.before, "a mix of patched and pristine files"
        st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
        assert {p["state"] for p in st["patches"]} == ({"applied"} if all_patched else {"pending"})
        assert (site / ".vllm-patcher" / "state.json").exists() == all_patched
    with capsys.disabled():
        print(f"\n[concurrency] {runs} concurrent runs in 8 rounds of 6, 0 violations")


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


def test_rewrite_after_apply_is_drift_and_apply_heals_it(trees: Trees, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(trees.patched, site)
    # what `pip install --force-reinstall vllm` does to the touched files
    for rel in trees.rels:
        shutil.copyfile(trees.pristine / rel, site / rel)
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert {p["state"] for p in st["patches"]} == {"drifted"}
    run_cli("--target", str(site), "apply", check=True)
    assert all(file_hash((site / r).read_bytes()) == trees.after[r] for r in trees.rels)
    # and a revert after a reinstall never writes stale copies over the reinstalled files
    for rel in trees.rels:
        shutil.copyfile(trees.pristine / rel, site / rel)
    out = json.loads(run_cli("--target", str(site), "--json", "revert", check=True).stdout)
    assert out["restored"] == [] and sorted(out["already_pristine"]) == sorted(trees.rels)
    assert not (site / ".vllm-patcher" / "state.json").exists()
