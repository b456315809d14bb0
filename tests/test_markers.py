"""tests/conftest.py sorts tests into tiers and lanes by name (NOT_UNIT, PYTHONS, the shared-venv,
0.17.1 and engine lists): every file and ``file::test`` it names exists, so a renamed or moved
test cannot drop out of its tier unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

from . import conftest

TESTS = Path(__file__).resolve().parent


def _tests_by_file() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names = {
            node.name
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test_")
        }
        found.setdefault(path.name, set()).update(names)
    return found


def test_every_test_the_tier_lists_name_exists() -> None:
    listed = [
        *conftest.NOT_UNIT,
        *conftest.PYTHONS,
        *conftest.SHARED_VENV_FILES,
        *conftest.VENV_0171_FILES,
        *conftest.ENGINE_FILES,
        *conftest.ENGINE_TIMED_FILES,
        *conftest.READ_ONLY_ENGINE_FILES,
        *conftest.CRASH_SAFETY_FILES,
        conftest.HF_FROM_THE_VENV,
    ]
    tests = _tests_by_file()
    missing = []
    for entry in listed:
        file, _, name = entry.partition("::")
        if file not in tests or (name and name not in tests[file]):
            missing.append(entry)
    assert len(listed) > 30
    assert missing == []
