"""Hostile or broken input: each a clear error, nothing written outside vLLM and our state."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_patcher import state, txn
from vllm_patcher.errors import NotWritable
from vllm_patcher.target import locate_in_directory

from .conftest import REPO, assert_refused, run_cli, snapshot, touched_match_record

SPEC = "vllm/config/speculative.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def pins_with(tmp_path: Path, edit) -> dict[str, str]:  # type: ignore[no-untyped-def]
    pins = tmp_path / "pins"
    shutil.copytree(REPO / "patches" / "vllm-0.15.1", pins / "vllm-0.15.1")
    edit(pins / "vllm-0.15.1")
    return {"VLLM_PATCHER_PATCHES_DIR": str(pins)}


@pytest.mark.parametrize(
    "bad_path", ["/etc/passwd", "vllm/../../outside.py", "../vllm/config/speculative.py"]
)
def test_pinned_diff_paths_that_leave_vllm_are_refused(
    tree_copy, tmp_path: Path, bad_path: str
) -> None:  # type: ignore[no-untyped-def]
    def edit(folder: Path) -> None:
        diff = folder / "eagle3-whitelist.diff"
        text = diff.read_text()
        diff.write_text(
            text.replace(f"a/{SPEC}", f"a/{bad_path}").replace(f"b/{SPEC}", f"b/{bad_path}")
        )

    site = tree_copy("0.15.1")
    outside = tmp_path / "outside.py"
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply", env=pins_with(tmp_path, edit))
    assert_refused(proc, 7, "outside vllm/")
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
        run_cli("--target", str(site), "apply", env=pins_with(tmp_path, edit)), 7, "outside vllm/"
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
    real = state.atomic_write
    writes: list[Path] = []

    def failing(path: Path, data: bytes, mode: int | None = None) -> None:
        if path.suffix == ".py" and ".vllm-patcher" not in path.parts:
            writes.append(path)
            if len(writes) == 3:
                raise NotWritable(f"cannot write {path}: Read-only file system")
        real(path, data, mode)

    monkeypatch.setattr(state, "atomic_write", failing)
    with pytest.raises(NotWritable):
        txn.apply(locate_in_directory(str(site)))
    assert len(writes) >= 3
    assert all(touched_match_record(site).values()), (
        "files written before the failure stayed patched"
    )
    after = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher")}
    assert after == {k: v for k, v in before.items() if not k.startswith(".vllm-patcher")}
    assert not (site / ".vllm-patcher").exists()


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "disk"
    mount.mkdir()
    # sized so the tree fits but the pristine copies apply keeps do not
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=560k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(
            f"needs root to mount a small tmpfs for the full-disk case: {proc.stderr.strip()}"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_during_apply_loses_nothing(tree_copy, small_disk: Path) -> None:  # type: ignore[no-untyped-def]
    site = small_disk / "site"
    shutil.copytree(tree_copy("0.15.1"), site)
    before = snapshot(site)
    free = shutil.disk_usage(small_disk).free
    proc = run_cli("--target", str(site), "apply")
    assert_refused(proc, 6, "no space left on device")
    assert snapshot(site) == before, f"the tree changed (free before: {free} bytes)"
