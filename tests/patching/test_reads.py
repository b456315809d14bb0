"""Each file is read once per command: counted with an audit hook inside the real command line.

A second read of a file is where a concurrent run's bytes used to slip in between judging and
planning; the transaction now plans from the bytes it judged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import pinned_diffs, record_of, run_cli, touched_files, version_of

AUDITED = r"""
import json, os, sys
from collections import Counter
root, argv = sys.argv[1], sys.argv[2:]
reads = Counter()
def hook(event, args):
    if event != "open" or isinstance(args[0], int):
        return
    path, mode, flags = args
    reading = (mode is None and flags & os.O_ACCMODE == os.O_RDONLY) or (
        isinstance(mode, str) and "r" in mode and "+" not in mode
    )
    name = os.path.abspath(os.fsdecode(path))
    if reading and (name.startswith(root) or name.endswith("manifest.json")):
        reads[os.path.relpath(name, root) if name.startswith(root) else "manifest.json"] += 1
sys.addaudithook(hook)
from vllm_patcher.cli import main
try:
    main(["--target", root, *argv], prog_name="vllm-patcher")
finally:
    print(json.dumps(reads), file=sys.stderr)
"""


def counted(site: Path, *args: str) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-c", AUDITED, str(site), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", ["status", "apply", "revert", "apply-again"])
def test_each_file_is_read_once_per_command(tree_copy, command: str) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    rels = touched_files(record_of(site), version_of(site))
    if command in ("revert", "apply-again"):
        run_cli("--target", str(site), "apply", check=True)
    reads = counted(site, command.removesuffix("-again"))
    for rel in rels:
        assert reads.get(rel) == 1, (rel, reads)
        if command == "revert":
            assert reads.get(f".vllm-patcher/pristine/{rel}") == 1, (rel, reads)
    assert reads.get(".vllm-patcher/state.json", 0) <= 1, reads
    # one manifest per patch pinned for the release, each read once
    assert reads.get("manifest.json", 0) <= len(pinned_diffs("0.15.1")), reads
    data = {k: v for k, v in reads.items() if k.endswith(".py")}  # not the fsync of folders
    assert set(data) >= set(rels) and max(data.values()) == 1, data
    shutil.rmtree(site)
