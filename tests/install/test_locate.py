"""vllm_patcher/install/locate.py, as the patching commands meet it: the vLLM install to work
on is found, or refused with one clear line and a documented exit code (no vLLM, no interpreter,
an empty or doubled location, a release before the supported range, a RECORD without hashes),
nothing written; and the hints name the environment that was refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import assert_refused, run_cli, scratch_tree, snapshot, test_venv_python
from ..patching.sites import SPEC


def test_no_vllm_for_this_interpreter() -> None:
    # the development venv has the tool but no vLLM
    assert_refused(run_cli("status"), 3, "no vLLM installed", "--python")


def test_no_vllm_for_another_interpreter() -> None:
    assert_refused(run_cli("--python", sys.executable, "apply"), 3, "no vLLM installed")


def test_interpreter_that_does_not_exist(tmp_path: Path) -> None:
    assert_refused(
        run_cli("--python", str(tmp_path / "nope" / "python"), "apply"), 3, "does not exist"
    )


def test_target_without_vllm(tmp_path: Path) -> None:
    assert_refused(run_cli("--target", str(tmp_path), "status"), 3, "no vllm-*.dist-info")


def test_an_empty_path_is_named_not_read_as_the_current_folder() -> None:
    assert_refused(run_cli("--target", "", "status"), 3, "--target got an empty path")
    assert_refused(run_cli("--python", "", "status"), 3, "--python got an empty path")
    assert_refused(run_cli("--target", "", "list"), 3, "--target got an empty path")


def test_python_given_a_site_packages_folder_points_to_target(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    assert_refused(run_cli("--python", str(site), "status"), 3, "--target takes a site-packages")


def test_exclusive_location_options(tmp_path: Path) -> None:
    proc = run_cli("--python", sys.executable, "--target", str(tmp_path), "status")
    assert proc.returncode == 2 and "exclusive" in proc.stderr and "Traceback" not in proc.stderr


def test_release_before_the_supported_range(tmp_path: Path) -> None:
    site = tmp_path / "site"
    scratch_tree("0.10.2", site)
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        assert_refused(
            run_cli("--target", str(site), command), 4, "0.10.2", "0.11.0 to 0.34.x pinned"
        )
    assert snapshot(site) == before


def test_a_record_without_hashes_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """An editable or source install has no pristine reference: never a false green."""
    site = tree_copy("0.15.1")
    record = site / "vllm-0.15.1.dist-info" / "RECORD"
    rows = [r.split(",")[0] + ",," for r in record.read_text().splitlines()]
    record.write_text("\n".join(rows) + "\n")
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        assert_refused(run_cli("--target", str(site), command), 3, "no sha256", "editable")
    assert snapshot(site) == before


def test_hints_name_the_same_environment_and_a_non_python_is_one_short_line(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A pasted hint must act on the environment that was refused, not the tool's own."""
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    (site / SPEC).write_text((site / SPEC).read_text() + "# edited after apply\n")
    proc = run_cli("--target", str(site), "revert")
    assert proc.returncode == 5
    assert f"vllm-patcher --target {site} revert --force" in proc.stderr
    proc = run_cli("--python", "/bin/ls", "status")
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 200, lines
    assert "did not answer like a Python interpreter" in lines[0]


# The command line run in this interpreter, each run of the where_vllm script counted: the
# interpreter it asked, one JSON list as stderr's last line.
COUNTED = """
import json, sys
from pathlib import Path
from vllm_patcher import runtime
asked = []
run_script = runtime.run_script
def counted(exe, args, **kwargs):
    if Path(args[0]).stem == "where_vllm":
        asked.append(str(exe))
    return run_script(exe, args, **kwargs)
runtime.run_script = counted
from vllm_patcher.cli import main
try:
    main(sys.argv[1:], prog_name="vllm-patcher")
finally:
    print(json.dumps(asked), file=sys.stderr)
"""


def test_a_command_asks_each_interpreter_where_its_vllm_is_once(tmp_path: Path) -> None:
    """doctor without --python locates the active venv's vLLM for its release, then again for the
    interpreter that looks repo ids up in the Hugging Face cache: one run of where_vllm for both."""
    python = test_venv_python()  # only asked, never written
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(python.parent.parent),
        "HF_HUB_CACHE": str(tmp_path / "empty-cache"),
        "HF_HUB_OFFLINE": "1",
    }
    args = ("doctor", "--model", "lab/target", "--drafter", "lab/drafter")
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    # refused after the venv's huggingface_hub looked the repo id up (so both uses were reached)
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "lab/target is not in the local cache" in proc.stderr, proc.stderr
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == [str(python)]
