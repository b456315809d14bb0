"""Bad input: one clear line on stderr, a documented exit code, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ..conftest import assert_refused, run_cli, scratch_tree, snapshot


def test_no_vllm_for_this_interpreter() -> None:
    # the development venv has the tool but no vLLM
    assert_refused(run_cli("status"), 3, "no vLLM installed", "--python")


def test_no_vllm_for_another_interpreter() -> None:
    assert_refused(run_cli("--python", sys.executable, "apply"), 3, "no vLLM installed")


def test_interpreter_that_does_not_exist(tmp_path: Path) -> None:
    assert_refused(
        run_cli("--python", str(tmp_path / "nope" / "python"), "apply"), 3, "does not exist"
    )


def test_target_without_vllm(tmp_path: Path) -> None:
    assert_refused(run_cli("--target", str(tmp_path), "status"), 3, "no vllm-*.dist-info")


def test_an_empty_path_is_named_not_read_as_the_current_folder() -> None:
    assert_refused(run_cli("--target", "", "status"), 3, "--target got an empty path")
    assert_refused(run_cli("--python", "", "status"), 3, "--python got an empty path")
    assert_refused(run_cli("--target", "", "list"), 3, "--target got an empty path")


def test_python_given_a_site_packages_folder_points_to_target(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    assert_refused(run_cli("--python", str(site), "status"), 3, "--target takes a site-packages")


def test_release_before_the_supported_range(tmp_path: Path) -> None:
    site = tmp_path / "site"
    scratch_tree("0.10.2", site)
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        assert_refused(run_cli("--target", str(site), command), 4, "0.10.2", "0.11.0 to 0.31.x")
    assert snapshot(site) == before


def test_locally_modified_file_is_named_and_nothing_is_patched(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    hotfix = site / "vllm/model_executor/models/kimi_k25.py"
    hotfix.write_text(hotfix.read_text() + "# local hotfix\n")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply")
    assert_refused(proc, 5, str(hotfix), "differs from what pip installed")
    assert snapshot(site) == before
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert {p["name"]: p["state"] for p in st["patches"]}["supports-eagle3"] == "drifted"


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


def test_dry_run_on_a_read_only_site_packages_prints_the_diff(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A reader needs no lock where nobody can write: dry-run still shows what apply would do."""
    site = tree_copy("0.15.1")
    before = snapshot(site)
    mode = site.stat().st_mode
    os.chmod(site, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        proc = run_cli("--target", str(site), "apply", "--dry-run")
    finally:
        os.chmod(site, mode)
    assert proc.returncode == 0, proc.stderr
    assert "+++ b/vllm/config/speculative.py" in proc.stdout
    assert snapshot(site) == before


def test_corrupt_state_record(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    state = site / ".vllm-patcher" / "state.json"
    state.write_text("{not json")
    before = snapshot(site)
    for command in ("status", "apply", "revert"):
        assert_refused(run_cli("--target", str(site), command), 7, "corrupt", "reinstall vLLM")
    assert snapshot(site) == before


def test_foreign_state_record(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    (site / ".vllm-patcher").mkdir()
    (site / ".vllm-patcher" / "state.json").write_text(json.dumps({"tool": "something-else"}))
    assert_refused(run_cli("--target", str(site), "apply"), 7, "not a vllm-patcher state record")


def test_edit_after_apply_blocks_revert_until_forced(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    edited = site / "vllm/config/speculative.py"
    edited.write_text(edited.read_text() + "# tuned by hand\n")
    mine = edited.read_bytes()
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "revert"), 5, str(edited), "--force")
    assert snapshot(site) == before
    forced = run_cli("--target", str(site), "--json", "revert", "--force", check=True)
    kept = json.loads(forced.stdout)["saved_edits"]["vllm/config/speculative.py"]
    assert Path(kept).read_bytes() == mine
    from ..conftest import touched_match_record

    assert all(touched_match_record(site).values())


def test_revert_force_never_overwrites_an_edit_it_kept_earlier_in_the_same_second(
    tree_copy,
) -> None:  # type: ignore[no-untyped-def]
    """saved/ is named by the second: an earlier copy of that second (and of the next two
    minutes, whatever the clock says when revert runs) keeps its bytes, the new one goes beside."""
    import time

    site = tree_copy("0.15.1")
    rel = "vllm/config/speculative.py"
    saved = site / ".vllm-patcher" / "saved"
    now = time.time()
    earlier = {}
    for i in range(120):
        copy = saved / time.strftime("%Y%m%dT%H%M%S", time.localtime(now + i)) / rel
        copy.parent.mkdir(parents=True)
        copy.write_bytes(b"an edit kept by an earlier revert --force %d\n" % i)
        earlier[copy] = copy.read_bytes()
    run_cli("--target", str(site), "apply", check=True)
    edited = site / rel
    edited.write_text(edited.read_text() + "# tuned by hand\n")
    mine = edited.read_bytes()
    forced = run_cli("--target", str(site), "--json", "revert", "--force", check=True)
    kept = Path(json.loads(forced.stdout)["saved_edits"][rel])
    assert kept.read_bytes() == mine and kept not in earlier
    assert {c: c.read_bytes() for c in earlier} == earlier
    # the run met a taken name (it ran within the two minutes) and went beside it
    stamp = kept.parents[len(Path(rel).parts) - 1].name
    assert stamp.endswith("-2") and (saved / stamp[:-2] / rel) in earlier, kept


def test_a_saved_folder_that_is_a_link_is_never_written_through(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """saved/ linked elsewhere (or into the package itself): revert --force refuses and changes
    nothing, like a linked state folder."""
    for i, aim in enumerate((tmp_path / "elsewhere", Path("../vllm"))):
        site = tree_copy("0.15.1").rename(tmp_path / f"case-{i}")
        run_cli("--target", str(site), "apply", check=True)
        edited = site / "vllm/config/speculative.py"
        edited.write_text(edited.read_text() + "# tuned by hand\n")
        if aim.is_absolute():
            aim.mkdir()
        (site / ".vllm-patcher" / "saved").symlink_to(aim)
        before = snapshot(site)
        proc = run_cli("--target", str(site), "revert", "--force")
        assert_refused(proc, 5, "saved", "link")
        assert snapshot(site) == before
        if aim.is_absolute():
            assert not any(aim.iterdir())


def test_a_revert_that_succeeded_exits_0_whatever_saved_is(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """The closing "left in place" line reads saved/ to say what is there; a saved/ it cannot
    list (here a file) makes it say copies may be there, never turns the done revert into a
    failure."""
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    (site / ".vllm-patcher" / "saved").write_text("not a folder")
    proc = run_cli("--target", str(site), "revert")
    assert proc.returncode == 0, proc.stderr
    assert "restored vllm/config/speculative.py" in proc.stdout and not proc.stderr
    assert "move them out" in proc.stdout
    from ..conftest import touched_match_record

    assert all(touched_match_record(site).values())


def test_a_forced_revert_that_fails_while_keeping_the_copies_leaves_no_folder(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A full disk at each write of a forced revert of two edited files: exit 6, every file as
    it was, and no saved/<stamp> folder left half-filled (each attempt would add one)."""
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    for rel in ("vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py"):
        (site / rel).write_bytes((site / rel).read_bytes() + b"# tuned by hand\n")
    before = snapshot(site)
    saved = site / ".vllm-patcher" / "saved"
    for n in (1, 2):  # the first copy's write, then the second's
        proc = run_cli(
            "--target",
            str(site),
            "revert",
            "--force",
            env={"VLLM_PATCHER_FAULT": f"enospc@write#{n}"},
        )
        assert_refused(proc, 6, "no space left")
        assert snapshot(site) == before
        assert not saved.exists() or not any(saved.iterdir()), list(saved.iterdir())


def test_exclusive_location_options(tmp_path: Path) -> None:
    proc = run_cli("--python", sys.executable, "--target", str(tmp_path), "status")
    assert proc.returncode == 2 and "exclusive" in proc.stderr and "Traceback" not in proc.stderr


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
