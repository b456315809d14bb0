"""Hostile or broken input: each a clear error, nothing written outside vLLM and our state."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from vllm_patcher import fileops
from vllm_patcher.errors import NotWritable
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.patching import journal, txn

from ..conftest import (
    CATALOGUE,
    CODEMODS,
    assert_refused,
    copy_builtins,
    run_cli,
    scratch_tree,
    snapshot,
    touched_match_record,
)

SPEC = "vllm/config/speculative.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def pins_with(tmp_path: Path, edit) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A copy of the built-ins with ``edit`` applied to eagle3-whitelist's 0.15.1 folder."""
    pins, env = copy_builtins(tmp_path)
    edit(pins / "eagle3-whitelist" / "vllm-0.15.1")
    return env


@pytest.mark.parametrize(
    "bad_path", ["/etc/passwd", "vllm/../../outside.py", "../vllm/config/speculative.py"]
)
def test_pinned_diff_paths_that_leave_vllm_are_refused(
    tree_copy, tmp_path: Path, bad_path: str
) -> None:  # type: ignore[no-untyped-def]
    def edit(folder: Path) -> None:
        diff = folder / "patch.diff"
        text = diff.read_text()
        diff.write_text(
            text.replace(f"a/{SPEC}", f"a/{bad_path}").replace(f"b/{SPEC}", f"b/{bad_path}")
        )

    site = tree_copy("0.15.1")
    outside = tmp_path / "outside.py"
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply", env=pins_with(tmp_path, edit))
    assert_refused(proc, 13, "outside vllm/")
    assert snapshot(site) == before
    assert not outside.exists()


def test_manifest_paths_that_leave_vllm_are_refused(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def edit(folder: Path) -> None:
        manifest = folder / "manifest.json"
        data = json.loads(manifest.read_text())
        data["files"]["../../etc/cron.d/x"] = data["files"].pop(SPEC)
        manifest.write_text(json.dumps(data))

    site = tree_copy("0.15.1")
    before = snapshot(site)
    assert_refused(
        run_cli("--target", str(site), "apply", env=pins_with(tmp_path, edit)), 13, "outside vllm/"
    )
    assert snapshot(site) == before


def test_state_record_naming_a_file_outside_vllm_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    path = site / ".vllm-patcher" / "state.json"
    data = json.loads(path.read_text())
    data["files"]["../evil.py"] = data["files"].pop(SPEC)
    path.write_text(json.dumps(data))
    before = snapshot(site)
    for command in ("status", "revert", "apply"):
        assert_refused(run_cli("--target", str(site), command), 7, "outside vllm/")
    assert snapshot(site) == before


def _rewrite_record(site: Path, rel: str, data: bytes) -> None:
    """Make ``rel`` hold ``data`` and RECORD agree, as a vendor's rebuilt wheel would."""
    (site / rel).write_bytes(data)
    record = next(site.glob("vllm-*.dist-info")) / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = list(csv.reader(io.StringIO(record.read_text())))
    for row in rows:
        if row and row[0] == rel:
            row[1], row[2] = f"sha256={digest}", str(len(data))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())


def test_a_file_that_is_not_utf8_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    _rewrite_record(site, DEEPSEEK, (site / DEEPSEEK).read_bytes() + b"# \xff\xfe latin-1 bytes\n")
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "apply"), 10, "not UTF-8")
    assert snapshot(site) == before


def test_a_missing_file_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    (site / SPEC).unlink()
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "apply"), 5, "reinstall vLLM")
    assert snapshot(site) == before
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert st["patches"][0]["state"] == "drifted" and "missing" in st["patches"][0]["detail"]


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
        txn.apply(locate_in_directory(str(site)), CATALOGUE)
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
        txn.apply(locate_in_directory(str(site)), CATALOGUE)
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
        txn.apply(locate_in_directory(str(site)), CATALOGUE)
    assert all(touched_match_record(site).values())
    assert_no_record(site)


def test_a_record_without_hashes_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """An editable or source install has no pristine reference: never a false green."""
    site = tree_copy("0.15.1")
    record = site / "vllm-0.15.1.dist-info" / "RECORD"
    rows = [r.split(",")[0] + ",," for r in record.read_text().splitlines()]
    record.write_text("\n".join(rows) + "\n")
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        assert_refused(run_cli("--target", str(site), command), 3, "no sha256", "editable")
    assert snapshot(site) == before


@pytest.mark.parametrize(
    ("sources_of", "expected"), [("0.15.1", "pending"), ("0.18.0", "upstream")]
)
def test_a_pre_release_of_0_18_is_checked_not_assumed(
    tmp_path: Path, sources_of: str, expected: str
) -> None:
    site = tmp_path / "site"
    scratch_tree(sources_of, site)
    info = site / f"vllm-{sources_of}.dist-info"
    metadata = info / "METADATA"
    metadata.write_text(
        metadata.read_text().replace(f"Version: {sources_of}\n", "Version: 0.18.0rc1\n", 1)
    )
    info.rename(site / "vllm-0.18.0rc1.dist-info")
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    # the codemod built-ins decide by their transforms; eagle3-minimax-m2 has no diff for an rc
    assert {p["state"] for p in st["patches"] if p["name"] in CODEMODS.names} == {expected}


def test_a_deleted_patched_file_is_restored_by_revert(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    (site / "vllm/model_executor/models/kimi_k25.py").unlink()
    run_cli("--target", str(site), "revert", check=True)
    assert all(touched_match_record(site).values())


def test_a_state_folder_that_is_a_link_is_refused(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    victim = tmp_path / "victim"
    (victim / "pristine").mkdir(parents=True)
    (victim / "pristine" / "keep").write_text("x")
    (site / ".vllm-patcher").symlink_to(victim)
    before = snapshot(victim)
    for command in ("revert", "apply", "status"):
        assert_refused(run_cli("--target", str(site), command), 5, "is a link")
    assert snapshot(victim) == before
    assert all(touched_match_record(site).values())


def test_an_unreadable_lock_timeout_is_a_clean_usage_error(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    proc = run_cli("--target", str(site), "apply", env={"VLLM_PATCHER_LOCK_TIMEOUT": "abc"})
    assert_refused(proc, 2, "VLLM_PATCHER_LOCK_TIMEOUT")
