"""vllm_patcher/patching/journal.py owns the state folder: its entries are named there and
nowhere else (issue 36: the names lived in journal.py, txn.py and recovery.py), each inside the
one folder. Through the real command line: a state record that is corrupt, foreign or names a
file outside vllm/, a state folder that is a link and an unusable lock timeout are refused
cleanly, and a saved/ it cannot list never fails a revert that is done."""

from __future__ import annotations

import json
import re
from pathlib import Path

from vllm_patcher.patching import journal

from ..conftest import assert_refused, run_cli, snapshot, touched_match_record
from .sites import SPEC

TOOL = Path(journal.__file__).resolve().parents[1]
ENTRIES = ("state.json", "pristine", "lock", "saved")


def test_only_the_journal_names_the_state_folder_s_entries() -> None:
    named = {
        f"{path.relative_to(TOOL)}: {entry}"
        for path in TOOL.rglob("*.py")
        if path.name != "journal.py"
        for entry in ENTRIES
        if re.search(rf"""/ ["']{re.escape(entry)}["']""", path.read_text())
    }
    assert named == set()
    source = Path(journal.__file__).read_text()
    assert all(f'/ "{entry}"' in source for entry in ENTRIES)


def test_every_entry_lies_in_the_state_folder(tmp_path: Path) -> None:
    folder = journal.state_dir(tmp_path)
    entries = [
        journal.state_file(tmp_path),
        journal.pristine_dir(tmp_path),
        journal.lock_file(tmp_path),
        journal.saved_dir(tmp_path),
        journal.pristine_path(tmp_path, "vllm/config/speculative.py").parents[2],
    ]
    assert [e.parent for e in entries[:4]] == [folder] * 4
    assert entries[4] == journal.pristine_dir(tmp_path)
    assert [e.name for e in entries[:4]] == list(ENTRIES)


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
