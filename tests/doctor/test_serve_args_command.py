"""serve-args: exactly the speculative config, or a refusal of what doctor calls a problem."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vllm_patcher.cli.doctor import NOT_CHECKED

from ..conftest import assert_refused, run_cli
from ..models.model_files import (
    HIDDEN,
    KEY,
    drafter_weights,
    kimi_target,
    ready_kimi_pair,
    specforge_drafter,
    write_json,
)
from .reports import check

# --- serve-args -------------------------------------------------------------------------------------

NOTE = f"vllm-patcher: note: {NOT_CHECKED}\n"


def test_serve_args_prints_exactly_the_speculative_config(tmp_path: Path) -> None:
    target, drafter = ready_kimi_pair(tmp_path)
    relative = os.path.relpath(drafter)  # the child runs in this process's directory
    args = ("--model", str(target), "--vllm-version", "0.15.1")
    proc = run_cli("serve-args", *args, "--drafter", relative)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f'{{"method": "eagle3", "model": "{drafter}", "num_speculative_tokens": 3}}\n'
    )
    assert proc.stderr == NOTE  # --vllm-version: the venv was not judged, and it says so
    # not a report: --json (before or after the command) changes not one byte of stdout
    assert run_cli("--json", "serve-args", *args, "--drafter", relative).stdout == proc.stdout
    assert run_cli("serve-args", *args, "--drafter", relative, "--json").stdout == proc.stdout
    proc = run_cli("serve-args", *args, "--drafter", str(drafter), "--num-speculative-tokens", "5")
    assert json.loads(proc.stdout) == {
        "method": "eagle3",
        "model": str(drafter),
        "num_speculative_tokens": 5,
    }


def test_serve_args_needs_a_drafter_config(tmp_path: Path) -> None:
    proc = run_cli(
        "serve-args", "--model", str(kimi_target(tmp_path)), "--drafter", str(tmp_path),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, "has no config.json")


def test_serve_args_needs_the_model_to_run_doctors_checks(tmp_path: Path) -> None:
    proc = run_cli("serve-args", "--drafter", str(specforge_drafter(tmp_path)))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Missing option '--model'" in proc.stderr


def serve_args_refusal(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Refused with exit 1: nothing on stdout for $(...) to pass to vllm serve, the problems on
    stderr, no traceback."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("vllm-patcher: error: serve-args: ")
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr
    return proc.stderr


def test_serve_args_refuses_a_directory_that_is_not_an_eagle3_drafter(tmp_path: Path) -> None:
    plain = specforge_drafter(
        tmp_path, weights=drafter_weights(), architectures=["LlamaForCausalLM"]
    )
    serve_args_refusal(
        run_cli(
            "serve-args",
            "--model",
            str(kimi_target(tmp_path)),
            "--drafter",
            str(plain),
            "--vllm-version",
            "0.15.1",
        ),  # fmt: skip
        'problem: architecture: drafter architectures ["LlamaForCausalLM"] name no EAGLE-3 head',
        "doctor found 1 problem",
    )


def test_serve_args_refuses_a_target_given_as_the_drafter(tmp_path: Path) -> None:
    target = kimi_target(tmp_path)
    serve_args_refusal(
        run_cli(
            "serve-args",
            "--model",
            str(target),
            "--drafter",
            str(target),
            "--vllm-version",
            "0.15.1",
        ),  # fmt: skip
        f"problem: roles: --drafter {target}",
        "looks like a target model, not an EAGLE-3 drafter",
    )


def test_serve_args_refuses_what_doctor_calls_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    stderr = serve_args_refusal(
        run_cli(
            "serve-args",
            "--model",
            str(kimi_target(tmp_path)),
            "--drafter",
            str(drafter),
            "--vllm-version",
            "0.15.1",
        ),  # fmt: skip
        "problem: aux-layers: vLLM 0.15.1 ignores",
        'fix: add "eagle_aux_hidden_state_layer_ids": [3, 31, 59]',
    )
    # the same pair passes once the key is there; a warning does not refuse
    assert run_cli("doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
                   "--vllm-version", "0.15.1", "--fix").returncode == 0  # fmt: skip
    proc = run_cli(
        "serve-args", "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == str(drafter) and stderr


def test_serve_args_refuses_a_release_apply_cannot_patch(tmp_path: Path) -> None:
    target, drafter = ready_kimi_pair(tmp_path)
    serve_args_refusal(
        run_cli(
            "serve-args",
            "--model",
            str(target),
            "--drafter",
            str(drafter),
            "--vllm-version",
            "0.9.0",
        ),  # fmt: skip
        "problem: vllm-release: vLLM 0.9.0 is older than 0.11.0",
    )


@pytest.mark.parametrize(("version", "loads"), [("0.14.1", False), ("0.15.0", True)])
def test_a_kimi_k25_target_needs_a_release_that_has_its_model(
    tmp_path: Path, version: str, loads: bool
) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), eagle_aux_hidden_state_layer_ids=[3, 31, 59]
    )
    report = check(kimi_target(tmp_path), drafter, version)
    target_problems = [f for f in report.problems if f.check == "target"]
    if loads:
        assert target_problems == []
    else:
        (problem,) = target_problems
        assert "arrived in vLLM 0.15.0" in problem.message and problem.fix


def _granite_pair(root: Path) -> tuple[Path, Path]:
    target = write_json(
        root / "granite" / "config.json",
        {
            "architectures": ["GraniteForCausalLM"],
            "model_type": "granite",
            "hidden_size": HIDDEN,
            "num_hidden_layers": 40,
            "vocab_size": 49159,
        },
    ).parent
    drafter = specforge_drafter(
        root, vocab=49159, weights=drafter_weights(t2d=False), **{KEY: [2, 20, 37]}
    )
    return target, drafter


def test_serve_args_no_longer_warns_of_the_fixed_granite_graph_failure(
    tmp_path: Path,
) -> None:
    target, drafter = _granite_pair(tmp_path)
    args = ("serve-args", "--model", str(target), "--drafter", str(drafter))
    proc = run_cli(*args, "--vllm-version", "0.25.0")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["method"] == "eagle3"  # stdout stays vLLM's input alone
    # fixed in the patch: only the note that no venv was judged
    assert "known-failure" not in proc.stderr and "fault of vLLM" not in proc.stderr
    assert proc.stderr == NOTE
    quiet = run_cli(*args, "--vllm-version", "0.21.0")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == proc.stderr and quiet.stdout == proc.stdout
    doctor = run_cli("doctor", "--model", str(target), "--drafter", str(drafter),
                     "--vllm-version", "0.25.0")  # fmt: skip
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "known-failure" not in doctor.stdout


def test_serve_args_repeats_the_low_acceptance_warnings_on_stderr_and_still_prints(
    tmp_path: Path,
) -> None:
    target, drafter = _granite_pair(tmp_path)
    config = json.loads((drafter / "config.json").read_text())
    config.update(max_position_embeddings=4096, norm_before_fc=True)
    (drafter / "config.json").write_text(json.dumps(config))
    args = ("serve-args", "--model", str(target), "--drafter", str(drafter))
    proc = run_cli(*args, "--vllm-version", "0.17.1", "--max-model-len", "32768")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["method"] == "eagle3"  # stdout stays vLLM's input alone
    assert "vllm-patcher: warning: positions: drafter max_position_embeddings 4096" in proc.stderr
    assert "below --max-model-len 32768" in proc.stderr
    assert "vllm-patcher: warning: flags: the drafter's config sets norm_before_fc" in proc.stderr
    # the served context inside the drafter's, on a release that reads the flag: quiet
    quiet = run_cli(*args, "--vllm-version", "0.18.0", "--max-model-len", "4096")
    assert quiet.returncode == 0 and quiet.stderr == NOTE, quiet.stderr


def test_a_refusal_on_a_named_venv_names_the_doctor_run_for_that_venv(
    tmp_path: Path,
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    """The refusal's doctor command judges the same install (its --target here): run as printed,
    it gives the whole report, not "no vLLM installed"."""
    import shlex

    site = tree_copy("0.15.1")
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    proc = run_cli("--target", str(site), "serve-args", "--model", str(kimi_target(tmp_path)),
                   "--drafter", str(drafter))  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    hint = proc.stderr.rsplit("(", 1)[1].split(" shows the whole report")[0]
    assert hint.startswith(f"vllm-patcher --target {shlex.quote(str(site))} doctor "), hint
    doctor = run_cli(*shlex.split(hint)[1:])
    assert doctor.returncode == 1 and "aux-layers" in doctor.stdout, doctor.stderr
    assert "doctor: 2 problems" in doctor.stdout, doctor.stdout


def test_doctor_on_a_venv_whose_patched_file_was_edited_names_revert_force_first(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The breaker: the fix for a drifted file was `apply --model`, which refuses such a file
    (exit 5); the fix that works is `revert --force`, then the apply."""
    site = tree_copy("0.15.1")
    target, drafter = ready_kimi_pair(tmp_path)
    run_cli("--target", str(site), "apply", "--model", str(target), check=True)
    spec = site / "vllm/config/speculative.py"
    spec.write_text(spec.read_text() + "# my edit\n")
    proc = run_cli(
        "--target", str(site), "--json", "doctor", "--model", str(target), "--drafter",
        str(drafter),
    )  # fmt: skip
    (venv,) = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "venv"]
    assert venv["level"] == "problem" and "drifted" in venv["message"], venv
    assert "revert --force" in venv["fix"] and venv["fix"].endswith(f"apply --model {target}")
    fixed = run_cli("--target", str(site), "revert", "--force")
    assert fixed.returncode == 0, fixed.stderr
    run_cli("--target", str(site), "apply", "--model", str(target), check=True)
