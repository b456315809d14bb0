"""Never a false green, never a false refusal: the cases the trust issue reproduced, each closed.

All through the real command line on real pristine 0.15.1 trees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vllm_patcher.install.record import file_hash

from ..conftest import pinned_diffs, record_of, run_cli, snapshot, touched_files
from .test_hostile_input import _rewrite_record

SPEC = "vllm/config/speculative.py"


def _states(site: Path) -> set[str]:
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    return {p["state"] for p in st["patches"]}


def test_revert_trusts_its_own_record_over_an_edited_record_file(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """RECORD rewritten to list the patched bytes must not make revert drop the pristine copy."""
    site = tree_copy("0.15.1")
    pristine = (site / SPEC).read_bytes()
    run_cli("--target", str(site), "apply", check=True)
    _rewrite_record(site, SPEC, (site / SPEC).read_bytes())  # a tool regenerated RECORD
    out = json.loads(run_cli("--target", str(site), "--json", "revert", check=True).stdout)
    assert SPEC in out["restored"] and SPEC not in out["already_pristine"]
    assert (site / SPEC).read_bytes() == pristine


def test_hand_applied_pinned_diffs_are_unrecorded_then_adopted_and_revertable(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    record = record_of(site)
    rels = touched_files(record, "0.15.1")
    for diff in pinned_diffs("0.15.1"):
        subprocess.run(["git", "apply", "-p1", str(diff)], cwd=site, check=True)
    assert _states(site) == {"unrecorded"}
    # not ready: a CI gate or a cluster verdict must not take hand-applied bytes as applied
    verify = run_cli("--target", str(site), "verify")
    assert verify.returncode == 1 and "unrecorded" in verify.stdout
    patched = {rel: (site / rel).read_bytes() for rel in rels}
    out = json.loads(run_cli("--target", str(site), "--json", "apply", check=True).stdout)
    assert sorted(out["adopted"]) == sorted(rels) and out["changed"] == []
    assert {rel: (site / rel).read_bytes() for rel in rels} == patched  # nothing rewritten
    assert _states(site) == {"applied"}
    run_cli("--target", str(site), "revert", check=True)
    assert all(file_hash((site / rel).read_bytes()) == record[rel] for rel in rels)


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
    assert _states(site) == {"applied"}


def test_a_closed_stdout_never_turns_a_failing_verify_green(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")  # nothing applied: the state tier fails
    assert _with_closed_stdout(site, "verify").returncode == 1


def test_status_on_an_interrupted_journal_judges_files_against_it(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """Files a killed apply already patched are that run's bytes, not a local edit."""
    site = tree_copy("0.15.1")
    # replaced #1..n: the pristine copies, n+1: the journal, n+2: the first patched file
    first_file = len(touched_files(record_of(site), "0.15.1")) + 2
    env = {
        "VLLM_PATCHER_FAULT": f"stop@replaced#{first_file}",
        "VLLM_PATCHER_FAULT_DIR": str(site.parent),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_patcher", "--target", str(site), "apply"],
        env={**os.environ, **env},
    )
    try:
        marker = site.parent / f"reached-{proc.pid}"
        while not marker.exists():
            assert proc.poll() is None
        proc.kill()
    finally:
        proc.wait()
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert st["interrupted"] == "applying" and st["in_progress"] is False
    assert "local edit" not in json.dumps(st)
    assert {f["state"] for f in st["files"]} == {"applied", "pending"}
    before = snapshot(site)
    dry = run_cli("--target", str(site), "apply", "--dry-run")
    assert dry.returncode == 7 and "interrupted" in dry.stderr
    assert snapshot(site) == before


def test_hints_name_the_same_environment_and_a_non_python_is_one_short_line(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A pasted hint must act on the environment that was refused, not the tool's own."""
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    (site / SPEC).write_text((site / SPEC).read_text() + "# edited after apply\n")
    proc = run_cli("--target", str(site), "revert")
    assert proc.returncode == 5
    assert f"vllm-patcher --target {site} revert --force" in proc.stderr
    proc = run_cli("--python", "/bin/ls", "status")
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 200, lines
    assert "did not answer like a Python interpreter" in lines[0]
