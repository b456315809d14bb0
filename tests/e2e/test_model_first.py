"""One model on one venv, on the real vLLM 0.15.1 venv through the real command line:
``apply --model`` and ``apply NAME...`` apply exactly what the target's family needs and a bare
``verify`` / ``status --check`` pass on that choice; ``doctor --python`` judges the venv's files;
``make serve VLLM_VENV=`` serves from the user's venv, removes nothing, and on a host without a
GPU stops at rehearse's no-device line before any server starts. The same flow on 0.17.1 is in
test_real_releases.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, run_cli, touched_match_record, venv_site
from ..models.model_files import ready_kimi_pair
from .model_flow import NEEDS, applied, granite_target, model_first_round_trip


@pytest.mark.parametrize("family", ["kimi", "deepseek", "granite"])
def test_apply_model_or_names_then_verify_and_check_pass_and_revert_is_record_identical(
    vllm_python: Path, tmp_path: Path, family: str
) -> None:
    model_first_round_trip(vllm_python, family, tmp_path)


def test_a_named_patch_this_release_does_not_need_says_why_and_pulls_in_nothing(
    vllm_python: Path,
) -> None:
    py = ("--python", str(vllm_python))
    try:
        proc = run_cli(*py, "apply", "eagle3-glm-moe-dsa", "eagle3-qwen3-moe")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert "nothing to do" in lines
        assert (
            "eagle3-glm-moe-dsa: not needed on vLLM 0.15.1: vLLM 0.15.1 is outside its releases "
            "(>=0.16.0)" in lines
        )
        assert "eagle3-qwen3-moe: not needed on vLLM 0.15.1: vLLM has it from 0.11.1" in lines
        assert applied(vllm_python) == set()  # supports-eagle3 is not pulled in where unused
    finally:
        run_cli(*py, "revert", check=True)


def test_doctor_judges_the_venv_it_is_given(vllm_python: Path, tmp_path: Path) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    py = ("--python", str(vllm_python))
    args = ("--model", str(model), "--drafter", str(drafter))
    try:
        before = run_cli(*py, "--json", "doctor", *args)
        assert before.returncode == 1, before.stdout
        report = json.loads(before.stdout)
        (venv,) = [f for f in report["findings"] if f["check"] == "venv"]
        assert venv["level"] == "problem"
        assert "eagle3-whitelist pending" in venv["message"]
        assert venv["fix"] == f"vllm-patcher --python {vllm_python} apply --model {model}"
        refused = run_cli(*py, "serve-args", *args)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "venv" in refused.stderr
        run_cli(*py, "apply", "--model", str(model), check=True)
        after = run_cli(*py, "--json", "doctor", *args)
        assert after.returncode == 0, after.stdout
        assert json.loads(after.stdout)["venv_checked"] is True
        release_only = run_cli(*py, "doctor", *args, "--vllm-version", "0.15.1")
        assert release_only.stdout.splitlines()[-2].startswith("venv: not checked")
    finally:
        run_cli(*py, "revert", check=True)
    assert all(touched_match_record(venv_site(vllm_python)).values())


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_make_serve_on_the_users_venv_removes_nothing_and_stops_at_no_device(
    vllm_python: Path, tmp_path: Path
) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    venv = vllm_python.parent.parent
    assert not list(venv.glob(".vllm-*"))  # a venv of the user's: no marker of this Makefile
    tool = Path(sys.executable).parent / "vllm-patcher"
    given = (f"VLLM_VENV={venv}", f"TOOL={tool}", f"MODEL={model}", f"DRAFTER={drafter}", "TP=1")
    dry = _make("-n", "serve", *given)
    assert dry.returncode == 0, dry.stderr
    assert "rm " not in dry.stdout and f"{venv}/bin/vllm serve" in dry.stdout
    try:
        proc = _make("serve", *given)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 2, said  # make's own code for a recipe that failed
        assert "finds no device it can run on" in said and "no server was started" in said
        assert "Error 24" in said  # rehearse's documented exit code for it
        assert "rehearse: vllm serve" not in said  # stopped before the rehearsal's server
        assert applied(vllm_python) == NEEDS["kimi"]  # apply --model ran on the user's venv
        assert (venv / "bin" / "python").exists()
    finally:
        run_cli("--python", str(vllm_python), "revert", check=True)


def test_two_models_on_one_venv_and_revert_of_one_keeps_the_other(
    vllm_python: Path, tmp_path: Path
) -> None:
    kimi, _ = ready_kimi_pair(tmp_path)
    granite = granite_target(tmp_path)
    py = ("--python", str(vllm_python))
    try:
        run_cli(*py, "apply", "--model", str(kimi), check=True)
        run_cli(*py, "apply", "--model", str(granite), check=True)
        assert applied(vllm_python) == NEEDS["kimi"] | NEEDS["granite"]
        proc = run_cli(*py, "revert", "--model", str(granite))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1] == (
            "applied again (chosen for another model here): "
            "eagle3-whitelist, kimi-k25-image-token, supports-eagle3"
        )
        assert applied(vllm_python) == NEEDS["kimi"]
        assert run_cli(*py, "status", "--check").returncode == 0
        assert run_cli(*py, "verify").returncode == 0
        run_cli(*py, "revert", "--model", str(kimi), check=True)
        assert all(touched_match_record(venv_site(vllm_python)).values())
    finally:
        run_cli(*py, "revert", check=True)
