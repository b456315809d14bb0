"""Every --json answer is one envelope (schema, command, ok, exit_code) with the command's keys
next to it, and validates against vllm_patcher/schema/output.schema.json: reports and errors alike.

All on tree copies (``--target``) or no vLLM at all."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ..conftest import REPO, run_cli, states_on
from ..models.model_files import kimi_target, specforge_drafter

SCHEMA = json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def answer(proc: subprocess.CompletedProcess[str], command: str | None, code: int) -> Any:
    """The envelope printed on stdout: valid, naming the command, with the process's exit code."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    VALIDATOR.validate(data)
    assert data["schema"] == "vllm-patcher/1"
    assert data["command"] == command
    assert data["exit_code"] == proc.returncode
    assert data["ok"] is (proc.returncode == 0)
    if code:
        assert data.get("error") or not data["ok"]
    return data


def error(
    proc: subprocess.CompletedProcess[str], command: str | None, code: int, text: str
) -> None:
    data = answer(proc, command, code)
    assert set(data) == {"schema", "command", "ok", "exit_code", "error"}, data
    assert text in data["error"], data["error"]


def test_the_schema_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    # and it is not vacuous: a report missing a key users rely on is rejected
    bad = {"schema": "vllm-patcher/1", "command": "status", "ok": True, "exit_code": 0}
    assert not VALIDATOR.is_valid(bad)
    assert not VALIDATOR.is_valid({**bad, "command": "status", "ok": True, "exit_code": 2})


def test_reports_on_a_tree_copy(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ["--json", "--target", str(site)]

    st = answer(run_cli(*target, "status"), "status", 0)
    assert st["fingerprint"] and [p["state"] for p in st["patches"]] == states_on(
        "0.15.1", "pending"
    )
    answer(run_cli("status", "--check", *target), "status", 1)  # the CI gate keeps its report

    dry = answer(run_cli(*target, "apply", "--dry-run"), "apply", 0)
    assert dry["dry_run"] and dry["would_change"] and not dry["changed"]
    applied = answer(run_cli(*target, "apply"), "apply", 0)
    assert applied["changed"] and applied["fingerprint"] != st["fingerprint"]
    again = answer(run_cli(*target, "apply"), "apply", 0)
    assert again["changed"] == []

    verified = answer(run_cli(*target, "verify"), "verify", 0)  # no interpreter: import skipped
    assert verified["tiers"] and verified["checks"]

    reverted = answer(run_cli(*target, "revert"), "revert", 0)
    assert reverted["restored"]
    assert answer(run_cli(*target, "status"), "status", 0)["fingerprint"] == st["fingerprint"]

    listed = answer(run_cli("list", "--json"), "list", 0)
    assert listed["patches"] and listed["releases"]


def test_usage_errors_print_the_envelope(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ["--target", str(site)]
    error(run_cli("--json", *target, "apply", "nosuch"), "apply", 2, "nosuch")
    error(run_cli(*target, "apply", "--bogus", "--json"), "apply", 2, "--bogus")
    error(
        run_cli("--json", "--bogus", "status"), "status", 2, "--bogus"
    )  # named though never reached
    error(run_cli("--json", "nosuch"), None, 2, "nosuch")
    # stderr is the one error line every refusal has, not click's usage block
    proc = run_cli("--json", "--bogus", "status")
    assert proc.stderr == "vllm-patcher: error: No such option '--bogus'.\n", proc.stderr
    error(run_cli("--json", "cluster", "status", "--bogus"), "cluster status", 2, "--bogus")
    error(
        run_cli("status", "--json", *target, env={"VLLM_PATCHER_LOCK_TIMEOUT": "x"}),
        "status",
        2,
        "VLLM_PATCHER_LOCK_TIMEOUT",
    )
    error(run_cli("--json", "status", "--target", str(tmp_path / "none")), "status", 3, "")
    # without --json a usage error still prints nothing on stdout
    assert run_cli(*target, "apply", "nosuch").stdout == ""


def test_writing_commands_refuse_with_the_envelope(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ["--json", "--target", str(site)]
    error(run_cli(*target, "capture", "mine"), "capture", 2, "--patches DIR")
    error(run_cli(*target, "import", "mine", "--diff", "x.diff"), "import", 2, "--patches DIR")
    error(run_cli(*target, "import", "mine"), "import", 2, "import needs --diff FILE")
    error(run_cli(*target, "port", "eagle3-whitelist"), "port", 2, "port needs --to VERSION")
    error(run_cli(*target, "port", "nope", "--to", "0.15.1"), "port", 2, "no patch named 'nope'")
    error(run_cli("--json", "pin"), "pin", 2, "VERSIONS")
    model = str(kimi_target(tmp_path / "k"))
    serve = ["serve-args", "--json", "--model", model, "--vllm-version", "0.15.1"]
    error(run_cli(*serve, "--drafter", str(tmp_path)), "serve-args", 11, "config")
    # a problem doctor found refuses with exit 1, and --json gives the envelope, not a config
    error(run_cli(*serve, "--drafter", model), "serve-args", 1, "doctor found 1 problem")


def test_capture_with_nothing_edited(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    proc = run_cli(
        "--json", "--target", str(site), "--patches", str(tmp_path / "mine"), "capture", "x"
    )
    data = answer(proc, "capture", proc.returncode)
    assert proc.returncode and data["error"]


def test_doctor(tmp_path: Path) -> None:
    model, drafter = str(kimi_target(tmp_path)), str(specforge_drafter(tmp_path))
    doctor = ["--json", "doctor", "--model", model, "--drafter", drafter]
    proc = run_cli(*doctor, "--vllm-version", "0.15.1")
    data = answer(proc, "doctor", proc.returncode)
    assert data["vllm_version"] == "0.15.1" and "findings" in data
    error(run_cli(*doctor, "--vllm-version", "banana"), "doctor", 2, "'banana'")


def test_doctor_reports_that_judge_nothing_or_write_a_guess(tmp_path: Path) -> None:
    model, drafter = kimi_target(tmp_path), specforge_drafter(tmp_path)
    # swapped: target, drafter and aux layers are null, one roles finding
    swapped = ["--json", "doctor", "--model", str(drafter), "--drafter", str(model)]
    data = answer(run_cli(*swapped, "--vllm-version", "0.15.1"), "doctor", 1)
    assert data["target"] is None and [f["check"] for f in data["findings"]] == ["roles"]
    # --fix wrote a guess: its basis is in the report
    config = drafter / "config.json"
    config.write_text(
        config.read_text().replace(
            '"vocab_size"', '"eagle_aux_hidden_state_layer_ids": [1, 2, 99], "vocab_size"'
        )
    )
    fixed = ["--json", "doctor", "--model", str(model), "--drafter", str(drafter), "--fix"]
    data = answer(run_cli(*fixed, "--vllm-version", "0.15.1"), "doctor", 0)
    assert [w["basis"] for w in data["fix"]["written"]] == ["guessed"]
    # and the schema holds the report to it
    broken = {**data, "fix": {**data["fix"], "written": [{"key": "x", "value": 1}]}}
    assert not VALIDATOR.is_valid(broken)


def test_cluster_status_with_no_cluster(tmp_path: Path) -> None:
    proc = run_cli("--json", "cluster", "status", "--address", "127.0.0.1:1", "--timeout", "1")
    data = answer(proc, "cluster status", 12)
    assert data["error"]


@pytest.mark.parametrize("command", [["--help"], ["status", "--help"], ["--version"]])
def test_help_and_version_are_not_reports(command: list[str]) -> None:
    proc = run_cli("--json", *command)
    assert proc.returncode == 0 and not proc.stdout.lstrip().startswith("{")
