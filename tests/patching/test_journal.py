"""vllm_patcher/patching/journal.py owns the state folder: its entries are named there and
nowhere else (they once lived in journal.py, txn.py and recovery.py too), each inside the
one folder. A state record that is corrupt, foreign or names a file outside vllm/, a state folder
that is a link and an unusable lock timeout are refused, with the exit code the command line
gives them, by status, apply and revert alike, and nothing is written; what revert leaves in the
folder is read from it, and a saved/ it cannot list may hold copies."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from vllm_patcher.errors import BadSetting, LocallyModified, PatcherError, StateError
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.patching import journal, status, txn

from ..conftest import CATALOGUE, snapshot, touched_match_record
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


OPERATIONS: dict[str, Callable[[Path], object]] = {
    "status": lambda site: status.read_status(locate_in_directory(str(site), CATALOGUE), CATALOGUE),
    "apply": lambda site: txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE),
    "revert": lambda site: txn.revert(locate_in_directory(str(site), CATALOGUE)),
}


def _refused_by_all(site: Path, error: type[PatcherError], code: int, fragment: str) -> None:
    """status, apply and revert each raise ``error`` (exit ``code``, naming ``fragment``)."""
    for name, operation in OPERATIONS.items():
        with pytest.raises(error, match=fragment) as refused:
            operation(site)
        assert refused.value.exit_code == code, name


def test_a_corrupt_state_record_is_refused_by_every_operation(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    journal.state_file(site).write_text("{not json")
    before = snapshot(site)
    with pytest.raises(StateError, match="reinstall vLLM"):
        journal.load(site)
    _refused_by_all(site, StateError, 7, "corrupt")
    assert snapshot(site) == before


def test_a_foreign_state_record_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    journal.state_dir(site).mkdir()
    journal.state_file(site).write_text(json.dumps({"tool": "something-else"}))
    before = snapshot(site)
    _refused_by_all(site, StateError, 7, "not a vllm-patcher state record")
    assert snapshot(site) == before


def test_a_state_record_naming_a_file_outside_vllm_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    path = journal.state_file(site)
    data = json.loads(path.read_text())
    data["files"]["../evil.py"] = data["files"].pop(SPEC)
    path.write_text(json.dumps(data))
    before = snapshot(site)
    _refused_by_all(site, StateError, 7, "outside vllm/")
    assert snapshot(site) == before


def test_a_state_folder_that_is_a_link_is_refused(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    victim = tmp_path / "victim"
    (victim / "pristine").mkdir(parents=True)
    (victim / "pristine" / "keep").write_text("x")
    journal.state_dir(site).symlink_to(victim)
    before = snapshot(victim)
    _refused_by_all(site, LocallyModified, 5, "is a link")
    assert snapshot(victim) == before
    assert all(touched_match_record(site).values())


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "inf"])
def test_an_unusable_lock_timeout_is_a_usage_error(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_PATCHER_LOCK_TIMEOUT", raw)
    with pytest.raises(BadSetting, match="VLLM_PATCHER_LOCK_TIMEOUT") as refused:
        journal.lock_timeout()
    assert refused.value.exit_code == 2
    monkeypatch.setenv("VLLM_PATCHER_LOCK_TIMEOUT", "2.5")
    assert journal.lock_timeout() == 2.5


def test_what_revert_leaves_is_read_from_the_folder(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """Only the lock after a plain revert; copies after a forced one; and a saved/ it cannot
    list (here a file) may hold copies, so it is never called empty."""
    site = tree_copy("0.15.1")
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    txn.revert(locate_in_directory(str(site), CATALOGUE))
    assert journal.left_in_place(site) == (journal.state_dir(site), False)
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    (site / SPEC).write_text((site / SPEC).read_text() + "# mine\n")
    txn.revert(locate_in_directory(str(site), CATALOGUE), force=True)
    assert journal.left_in_place(site).copies
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    shutil.rmtree(journal.saved_dir(site))
    journal.saved_dir(site).write_text("not a folder")
    result = txn.revert(
        locate_in_directory(str(site), CATALOGUE)
    )  # the revert is done all the same
    assert SPEC in result.restored and all(touched_match_record(site).values())
    assert journal.left_in_place(site).copies
