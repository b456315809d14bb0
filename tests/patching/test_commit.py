"""vllm_patcher/patching/commit.py: a plan committed as a transaction, all files or none. A
write that fails midway, a full disk at any write of apply or revert, Ctrl-C right after a
replace and a failed final journal write each leave every file as it was and nothing recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_patcher import fileops
from vllm_patcher.errors import NotWritable
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.patching import journal, txn

from ..conftest import CATALOGUE, assert_refused, run_cli, snapshot, touched_match_record


def test_failure_midway_through_the_write_phase_rolls_back(tree_copy, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A directory that turns read-only after the checks: the third file write fails."""
    site = tree_copy("0.15.1")
    before = snapshot(site)
    real = fileops.atomic_write
    writes: list[Path] = []

    def failing(path: Path, data: bytes, mode: int | None = None) -> None:
        if path.suffix == ".py" and ".vllm-patcher" not in path.parts:
            writes.append(path)
            if len(writes) == 3:
                raise NotWritable(f"cannot write {path}: Read-only file system")
        real(path, data, mode)

    monkeypatch.setattr(fileops, "atomic_write", failing)
    with pytest.raises(NotWritable):
        txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    assert len(writes) >= 3
    assert all(touched_match_record(site).values()), (
        "files written before the failure stayed patched"
    )
    after = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher")}
    assert after == {k: v for k, v in before.items() if not k.startswith(".vllm-patcher")}
    assert_no_record(site)


def assert_no_record(site: Path) -> None:
    """Nothing recorded and no pristine copy left; the state folder and its lock may stay."""
    state_dir = site / ".vllm-patcher"
    assert not (state_dir / "state.json").exists()
    assert not [p for p in (state_dir / "pristine").rglob("*") if p.is_file()]


def _writes_of(command: str, site: Path) -> int:
    """How many file writes a successful run of ``command`` makes (counted by the fault hook)."""
    count = 0
    while True:
        count += 1
        probe = site.parent / f"count-{command}-{count}"
        shutil.copytree(site, probe)
        proc = run_cli(
            "--target", str(probe), command, env={"VLLM_PATCHER_FAULT": f"enospc@write#{count}"}
        )
        shutil.rmtree(probe)
        if proc.returncode == 0:
            return count - 1


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_a_full_disk_at_any_write_loses_nothing(tree_copy, command: str) -> None:  # type: ignore[no-untyped-def]
    """ENOSPC injected at every write of apply and of revert, in turn: exit 6, every file as it was."""
    site = tree_copy("0.15.1")
    if command == "revert":
        run_cli("--target", str(site), "apply", check=True)
    writes = _writes_of(command, site)
    assert writes >= 5, writes  # the journal, the pristine copies or files, the journal again
    before = snapshot(site)
    for index in range(1, writes + 1):
        trial = site.parent / f"{command}-{index}"
        shutil.copytree(site, trial)
        proc = run_cli(
            "--target", str(trial), command, env={"VLLM_PATCHER_FAULT": f"enospc@write#{index}"}
        )
        assert_refused(proc, 6, "no space left on device")
        assert snapshot(trial) == before, f"write {index} of {writes}: the tree changed"
        shutil.rmtree(trial)


def test_an_interrupt_right_after_a_replace_still_rolls_everything_back(
    tree_copy, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C after os.replace but before the write loop notices: no half-patched tree."""
    site = tree_copy("0.15.1")
    real = fileops.fsync_dir

    def interrupted(directory: Path) -> None:
        real(directory)
        if str(directory).endswith("vllm/model_executor/models"):
            raise KeyboardInterrupt

    monkeypatch.setattr(fileops, "fsync_dir", interrupted)
    with pytest.raises(KeyboardInterrupt):
        txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    monkeypatch.setattr(fileops, "fsync_dir", real)
    assert all(touched_match_record(site).values())
    assert not (site / ".vllm-patcher" / "state.json").exists()
    run_cli("--target", str(site), "apply", check=True)


def test_a_failed_final_journal_write_rolls_back_the_files(tree_copy, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    real = journal.save

    def full_disk(site_packages: Path, record: journal.Journal) -> None:
        if record.phase is journal.Phase.APPLIED:
            raise NotWritable("no space left on device while writing state.json")
        real(site_packages, record)

    monkeypatch.setattr(journal, "save", full_disk)
    with pytest.raises(NotWritable):
        txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    assert all(touched_match_record(site).values())
    assert_no_record(site)
