"""vllm_patcher/patching/survey.py: each touched file judged from its bytes, read once.

Each file is read once per command: counted with an audit hook inside the real command line.
A second read of a file is where a concurrent run's bytes used to slip in between judging and
planning; the transaction now plans from the bytes it judged. Files an interrupted apply already
patched are judged against its journal, and a pre-release is judged by its bytes, not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import (
    pinned_diffs,
    record_of,
    run_cli,
    scratch_tree,
    snapshot,
    touched_files,
    version_of,
)

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


@pytest.mark.parametrize(
    ("sources_of", "expected"), [("0.15.1", "pending"), ("0.18.0", "upstream")]
)
def test_a_pre_release_of_0_18_is_checked_not_assumed(
    tmp_path: Path, sources_of: str, expected: str
) -> None:
    site = tmp_path / "site"
    scratch_tree(sources_of, site)
    info = site / f"vllm-{sources_of}.dist-info"
    metadata = info / "METADATA"
    metadata.write_text(
        metadata.read_text().replace(f"Version: {sources_of}\n", "Version: 0.18.0rc1\n", 1)
    )
    info.rename(site / "vllm-0.18.0rc1.dist-info")
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    # the DeepSeek/Kimi built-ins decide by their transforms, from the rc's own bytes (the
    # family backports, which 0.18.0 still needs, are pending either way)
    deepseek = ("eagle3-whitelist", "kimi-k25-image-token", "supports-eagle3")
    assert {p["state"] for p in st["patches"] if p["name"] in deepseek} == {expected}
