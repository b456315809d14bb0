"""The journal module owns the state folder: its entries are named there and nowhere else (issue
36: the names lived in journal.py, txn.py and recovery.py), each inside the one folder."""

from __future__ import annotations

import re
from pathlib import Path

from vllm_patcher.patching import journal

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
