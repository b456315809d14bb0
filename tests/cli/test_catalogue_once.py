"""One catalogue a command: the run's options (``cli/base.Options``) load it once and hand it
down, to locate (whose reference reads the built-ins) as to the command's own work.

Counted inside the real command line: every read of a patches folder (``catalogue.folders``'
``_load_folder``), the built-ins' and the user's. Locate used to load the built-ins again on its
own, and doctor loaded the user's folders a second time for its venv finding.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import run_cli
from ..models.model_files import ready_kimi_pair

COUNTED = r"""
import json, sys
from collections import Counter
from vllm_patcher.catalogue import folders
reads = Counter()
real = folders._load_folder
def counting(root, origin):
    reads["built-in" if origin == folders.BUILTIN else str(root)] += 1
    return real(root, origin)
folders._load_folder = counting
from vllm_patcher.cli import main
try:
    main(sys.argv[1:], prog_name="vllm-patcher")
except SystemExit:
    pass
print(json.dumps(reads), file=sys.stderr)
"""


def folder_reads(*args: str) -> dict[str, int]:
    """How often one run of the command line read each patches folder."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED, *args], capture_output=True, text=True, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return dict(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("apply", "--dry-run"),
        ("list",),
        ("revert",),
        ("doctor", "--model", "{model}", "--drafter", "{drafter}"),
        ("serve-args", "--model", "{model}", "--drafter", "{drafter}"),
        ("status", "--model", "{model}"),
    ],
)
def test_each_command_reads_each_patches_folder_once(
    tree_copy, tmp_path: Path, command: tuple[str, ...]
) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    model, drafter = ready_kimi_pair(tmp_path / "models")
    mine = tmp_path / "mine"
    mine.mkdir()
    args = [a.format(model=model, drafter=drafter) for a in command]
    reads = folder_reads("--target", str(site), *args)
    assert reads.get("built-in") == 1, reads
    assert all(n == 1 for n in reads.values()), reads
    reads = folder_reads("--target", str(site), "--patches", str(mine), *args)
    assert reads.get("built-in") == 1, reads
    if command[0] != "revert":  # revert reads no patch of the user's (below)
        assert reads.get(str(mine)) == 1, reads
    assert all(n == 1 for n in reads.values()), reads


def test_a_command_that_reads_no_patch_of_the_users_never_reads_their_folders(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Locate needs the built-ins only: a missing --patches folder refuses status, not revert."""
    site = tree_copy("0.15.1")
    missing = str(tmp_path / "missing")
    assert run_cli("--target", str(site), "--patches", missing, "revert").returncode == 0
    refused = run_cli("--target", str(site), "--patches", missing, "status")
    assert refused.returncode != 0 and "does not exist" in refused.stderr
