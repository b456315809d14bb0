"""vllm_patcher/patching/txn.py: apply and revert as transactions, through the real command
line. A dry run takes no lock (so it needs no write access), a revert over an edit made after
apply refuses until forced, and once a change is committed a closed stdout does not change the
exit code (nor turn a failing verify green)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ..conftest import assert_refused, run_cli, snapshot, states_on
from .sites import _states


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


def _with_closed_stdout(site: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with a stdout whose reader is gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "vllm_patcher", "--target", str(site), command],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)


def test_a_closed_stdout_after_a_committed_apply_keeps_exit_code_0(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """`vllm-patcher apply | head -0`: the files are patched, so the run succeeded."""
    site = tree_copy("0.15.1")
    proc = _with_closed_stdout(site, "apply")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert _states(site) == set(states_on("0.15.1", "applied"))


def test_a_closed_stdout_never_turns_a_failing_verify_green(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")  # nothing applied: the state tier fails
    assert _with_closed_stdout(site, "verify").returncode == 1
