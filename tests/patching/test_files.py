"""vllm_patcher/patching/files.py: the target's files written safely, through the real command
line. Never in a read-only directory, never through a link out of the package or to a path
outside vllm/ (the one rule, ``fileops.package_path_problem``, also refuses pinned diffs and
manifests that name one), and a pristine copy read back only when RECORD agrees with it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from vllm_patcher.install.record import file_hash

from ..conftest import assert_refused, copy_builtins, run_cli, snapshot
from .sites import FILES, SPEC


@pytest.mark.parametrize("where", ["site-packages", "package-dir"])
def test_read_only_site_packages(tree_copy, where: str) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    before = snapshot(site)
    locked = site if where == "site-packages" else site / "vllm/config"
    mode = locked.stat().st_mode
    os.chmod(locked, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        proc = run_cli("--target", str(site), "apply")
    finally:
        os.chmod(locked, mode)
    assert_refused(proc, 6, "read-only", "nothing was changed")
    assert snapshot(site) == before


def test_symlink_out_of_the_package_is_refused(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    outside = tmp_path / "outside.py"
    victim = site / "vllm/config/speculative.py"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    before_outside = outside.read_bytes()
    proc = run_cli("--target", str(site), "apply")
    assert_refused(proc, 5, "outside the vLLM package")
    assert outside.read_bytes() == before_outside


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


def test_revert_refuses_a_pristine_copy_that_record_contradicts(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """The pristine copy and its before-hash in state.json both changed: RECORD still knows."""
    site = tree_copy("0.15.1", FILES)
    run_cli("--target", str(site), "apply", check=True)
    copy = site / ".vllm-patcher" / "pristine" / SPEC
    planted = copy.read_bytes() + b"# planted\n"
    copy.write_bytes(planted)
    state_path = site / ".vllm-patcher" / "state.json"
    state = json.loads(state_path.read_text())
    state["files"][SPEC]["before"] = file_hash(planted)
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "revert")
    # a bare directory: the hint tells pip where (a plain `pip install` would use its own env)
    hint = f"pip install --force-reinstall --no-deps --upgrade --target {site} vllm==0.15.1"
    assert_refused(proc, 7, SPEC, "RECORD", hint)
    assert snapshot(site) == before


def test_a_missing_package_folder_is_missing_not_read_only(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """The breaker: a deleted vllm/config was reported as read-only (exit 6, "run as the
    environment's owner"); it is a missing part of the install (exit 5, reinstall)."""
    import shutil

    site = tree_copy("0.15.1")
    shutil.rmtree(site / "vllm/config")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply")
    assert_refused(proc, 5, "vllm/config is missing; nothing was changed; pip install")
    assert snapshot(site) == before
