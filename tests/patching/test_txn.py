"""vllm_patcher/patching/txn.py: apply and revert as transactions, on what they return. A dry
run takes no lock (so it needs no write access) and returns the diff it would write; apply returns
each file's edit, the method of each patch and the status it leaves; a second apply has nothing
left to do; a revert over an edit made after apply refuses until forced, then keeps the edit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vllm_patcher.errors import LocallyModified
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.patching import journal, txn

from ..conftest import CATALOGUE, methods_on, snapshot, states_on, touched_match_record
from .sites import SPEC


def _states(result: txn.ApplyResult) -> list[str]:
    assert result.status is not None
    return [p.state.value for p in result.status.patches]


def test_a_dry_run_on_a_read_only_site_packages_returns_the_diff_and_writes_nothing(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    """A reader needs no lock where nobody can write: the dry run still says what apply would do."""
    site = tree_copy("0.15.1")
    before = snapshot(site)
    mode = site.stat().st_mode
    os.chmod(site, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        result = txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE, dry_run=True)
    finally:
        os.chmod(site, mode)
    assert result.dry_run and SPEC in result.changed
    assert f"+++ b/{SPEC}" in result.diff
    data = result.to_dict()
    assert data["changed"] == [] and SPEC in data["would_change"]  # type: ignore[operator]
    assert _states(result) == states_on("0.15.1", "pending")  # the status as it is
    assert snapshot(site) == before
    assert not journal.state_file(site).exists()


def test_apply_returns_its_edits_and_the_status_it_leaves_and_a_second_has_nothing_to_do(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    target = locate_in_directory(str(site), CATALOGUE)
    first = txn.apply(target, CATALOGUE)
    assert not first.dry_run and SPEC in first.changed and first.adopted == []
    assert _states(first) == states_on("0.15.1", "applied")
    pinned = {p.name for p, m in zip(CATALOGUE.patches, methods_on("0.15.1"), strict=True) if m}
    assert pinned and set(first.methods) == pinned
    for edit in first.edits:  # each edit is what the file now holds
        assert (site / edit.path).read_bytes() == edit.after != edit.before
    assert not all(touched_match_record(site).values())
    again = txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    assert again.edits == [] and again.recovered == []
    assert _states(again) == states_on("0.15.1", "applied")


def test_an_edit_after_apply_blocks_revert_until_forced_which_keeps_the_edit(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    txn.apply(locate_in_directory(str(site), CATALOGUE), CATALOGUE)
    edited = site / SPEC
    edited.write_text(edited.read_text() + "# tuned by hand\n")
    mine = edited.read_bytes()
    before = snapshot(site)
    with pytest.raises(LocallyModified, match="revert --force") as refused:
        txn.revert(locate_in_directory(str(site), CATALOGUE))
    assert str(edited) in str(refused.value)
    assert snapshot(site) == before
    forced = txn.revert(locate_in_directory(str(site), CATALOGUE), force=True)
    assert Path(forced.saved_edits[SPEC]).read_bytes() == mine
    assert SPEC in forced.restored and forced.recovered == []
    assert all(touched_match_record(site).values())


def test_a_revert_where_nothing_was_applied_returns_nothing_and_creates_no_state_folder(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    before = snapshot(site)
    result = txn.revert(locate_in_directory(str(site), CATALOGUE))
    assert result.to_dict() == {
        "restored": [],
        "recovered": [],
        "already_pristine": [],
        "saved_edits": {},
    }
    assert snapshot(site) == before and not journal.state_dir(site).exists()
