"""What can differ between the Pythons a user's venv may have (3.10 to 3.13): the tool's own
modules, the scripts it runs inside a target interpreter, and the patch folders' TOML reader.

`make unit-pythons` runs these (and the files listed in conftest's PYTHONS_FILES) under the oldest
and the newest Python; the whole suite runs under the default one.
"""

from __future__ import annotations

import importlib
import pkgutil
import py_compile
import subprocess
import sys
from pathlib import Path

import vllm_patcher

from .conftest import REPO, run_cli


def _modules() -> list[str]:
    """Every module but ``__main__`` (it runs the command line; run_cli drives it)."""
    return sorted(
        m.name
        for m in pkgutil.walk_packages(vllm_patcher.__path__, prefix="vllm_patcher.")
        if m.name != "vllm_patcher.__main__"
    )


def test_every_module_of_the_tool_imports_under_this_python() -> None:
    names = _modules()
    assert {"vllm_patcher.cli", "vllm_patcher.patching.status", "vllm_patcher.wheels.fetch"} <= set(
        names
    )
    for name in names:
        importlib.import_module(name)


def test_every_script_and_check_the_tool_runs_in_a_target_compiles_under_this_python(
    tmp_path: Path,
) -> None:
    """The probe, the cluster driver and every patch's checks run in the *target's* interpreter,
    which may be any supported Python: each must compile there."""
    files = [
        *(REPO / "vllm_patcher").rglob("*.py"),
        *(REPO / "patches").rglob("*.py"),
    ]
    assert any(f.name == "probe.py" for f in files)
    assert any(f.parent.name == "checks" for f in files)
    for path in files:
        py_compile.compile(str(path), cfile=str(tmp_path / "out.pyc"), doraise=True)


def test_the_built_in_patch_folders_load_with_this_pythons_toml_reader() -> None:
    # tomllib from 3.11, tomli on 3.10: the same catalogue either way
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--json", "list"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"eagle3-whitelist"' in proc.stdout and '"eagle3-minimax-m2"' in proc.stdout


def test_the_command_line_parses_and_answers_version_and_help() -> None:
    out = run_cli("--help", check=True).stdout
    for command in ("apply", "verify", "revert", "status", "capture", "port", "doctor"):
        assert command in out
