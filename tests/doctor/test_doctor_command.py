"""doctor on the command line: exit codes, text and JSON, --fix and its backups, bad input."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from vllm_patcher.doctor import PROBLEM

from ..conftest import assert_refused, run_cli, snapshot
from ..models.model_files import (
    DEEPSEEK_VOCAB,
    KEY,
    deepseek_target,
    drafter_weights,
    kimi_target,
    specforge_drafter,
)
from .reports import doctor_json

# --- the command line -------------------------------------------------------------------------------


def test_consistent_pair_exits_0_with_no_warning(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path,
        vocab=DEEPSEEK_VOCAB,
        nested=[1, 29, 57],
        weights=drafter_weights(),
        **{KEY: [2, 30, 58]},
    )
    code, data = doctor_json(
        "--model",
        str(deepseek_target(tmp_path)),
        "--drafter",
        str(drafter),
        "--vllm-version",
        "0.15.1",
    )
    assert code == 0
    assert data["ok"] is True and data["problems"] == 0 and data["warnings"] == 0
    assert {f["level"] for f in data["findings"]} == {"ok"}
    assert data["aux_layers"]["vllm_ids"] == [2, 30, 58]
    assert data["aux_layers"]["sglang_ids"] == [1, 29, 57]
    assert data["aux_layers"]["source"] == "top-level"


def test_kimi_problem_exits_1_and_text_shows_the_fix(tmp_path: Path) -> None:
    target = kimi_target(tmp_path)
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    before = snapshot(drafter)
    proc = run_cli(
        "doctor", "--model", str(target), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "aux layers: vLLM [2, 30, 58]" in out and "SGLang/SpecForge [1, 29, 57]" in out
    assert "from default" in out
    problem_lines = [line for line in out.splitlines() if line.strip().startswith("problem")]
    assert len(problem_lines) == 1 and "aux-layers" in problem_lines[0]
    assert 'fix: add "eagle_aux_hidden_state_layer_ids": [3, 31, 59]' in out
    assert out.strip().splitlines()[-1] == "doctor: 1 problem, 0 warnings"
    # without --fix nothing is written
    assert snapshot(drafter) == before


def test_json_findings_carry_level_message_and_fix(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    code, data = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    assert code == 1 and data["ok"] is False and data["vllm_version"] == "0.15.1"
    (problem,) = [f for f in data["findings"] if f["level"] == PROBLEM]
    assert set(problem) == {"check", "level", "message", "fix"}
    assert "[3, 31, 59]" in problem["fix"]
    assert data["aux_layers"]["fix_top_level"] == [3, 31, 59]
    assert data["fix"] is None


@pytest.mark.parametrize(
    ("version", "code", "source"), [("0.11.0", 1, "default"), ("0.22.0", 1, "nested")]
)
def test_same_kimi_drafter_on_other_releases(
    tmp_path: Path, version: str, code: int, source: str
) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    got, data = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", version
    )
    assert got == code
    assert data["aux_layers"]["source"] == source
    assert data["aux_layers"]["vllm_ids"] == [2, 30, 58]


def test_fix_writes_the_key_keeps_a_backup_and_the_next_run_passes(tmp_path: Path) -> None:
    target = kimi_target(tmp_path)
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    config = drafter / "config.json"
    original = config.read_bytes()
    args = ("--model", str(target), "--drafter", str(drafter), "--vllm-version", "0.15.1")

    proc = run_cli("doctor", *args, "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"--fix wrote to {config}" in proc.stdout
    assert (
        "  eagle_aux_hidden_state_layer_ids: [3, 31, 59] (known, from the drafter's "
        "eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58], SpecForge layer outputs, "
        "+1 into vLLM's convention)"
    ) in proc.stdout.splitlines()
    assert "GUESS" not in proc.stdout
    assert (drafter / "config.json.bak").read_bytes() == original
    before, after = json.loads(original), json.loads(config.read_bytes())
    assert list(after) == [*before, KEY]
    assert after[KEY] == [3, 31, 59]
    assert {k: v for k, v in after.items() if k != KEY} == before
    assert config.read_text().startswith('{\n  "architectures"')  # indentation kept

    code, data = doctor_json(*args)
    assert code == 0 and data["aux_layers"]["source"] == "top-level"
    assert data["aux_layers"]["vllm_ids"] == [3, 31, 59]

    # nothing left to write: a second --fix leaves the files alone
    fixed = snapshot(drafter)
    assert run_cli("doctor", *args, "--fix").returncode == 0
    assert snapshot(drafter) == fixed


def test_fix_never_overwrites_an_earlier_backup(tmp_path: Path) -> None:
    target = kimi_target(tmp_path)
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    (drafter / "config.json.bak").write_bytes(b"an older backup")
    original = (drafter / "config.json").read_bytes()
    code, data = doctor_json(
        "--model", str(target), "--drafter", str(drafter), "--vllm-version", "0.15.1", "--fix"
    )
    assert code == 0
    assert data["fix"]["backup"] == str(drafter / "config.json.bak.1")
    assert (drafter / "config.json.bak").read_bytes() == b"an older backup"
    assert (drafter / "config.json.bak.1").read_bytes() == original


def test_fix_writes_nothing_when_only_an_upgrade_helps(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    before = snapshot(drafter)
    proc = run_cli(
        "doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.11.0", "--fix",
    )  # fmt: skip
    assert proc.returncode == 1
    assert "--fix: nothing it can write" in proc.stdout
    assert snapshot(drafter) == before


def test_deepseek_fix_makes_the_default_explicit(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, vocab=DEEPSEEK_VOCAB, nested=[1, 29, 57], weights=drafter_weights()
    )
    code, data = doctor_json(
        "--model", str(deepseek_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.17.1", "--fix",
    )  # fmt: skip
    assert code == 0
    assert json.loads((drafter / "config.json").read_text())[KEY] == [2, 30, 58]
    assert data["warnings"] == 0 and data["aux_layers"]["source"] == "top-level"


# --- bad input --------------------------------------------------------------------------------------


def test_missing_model_directory(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path)
    proc = run_cli(
        "doctor", "--model", str(tmp_path / "nope"), "--drafter", str(drafter),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, "does not exist")


def test_drafter_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_cli(
        "doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(tmp_path / "empty"),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, "has no config.json")


@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2, 3]", '{"model_type": "deepseek_v3", "hidden_size": 7168}']
)
def test_invalid_target_config(tmp_path: Path, text: str) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(text)
    proc = run_cli(
        "doctor", "--model", str(target), "--drafter", str(specforge_drafter(tmp_path)),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, str(target / "config.json"))


@pytest.mark.parametrize("damage", ["truncated", "short", "not-json", "offsets-past-the-end"])
def test_corrupt_safetensors(tmp_path: Path, damage: str) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights())
    path = drafter / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    if damage == "truncated":
        path.write_bytes(data[: 8 + length // 2])
    elif damage == "short":
        path.write_bytes(b"\x01\x02")
    elif damage == "not-json":
        path.write_bytes(data[:8] + b"\xff" * length)
    else:
        with path.open("r+b") as fh:
            fh.truncate(8 + length + 10)
    before = snapshot(drafter)
    proc = run_cli(
        "doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.15.1", "--fix",
    )  # fmt: skip
    assert_refused(proc, 11, "model.safetensors is not a readable safetensors file")
    assert snapshot(drafter) == before


@pytest.mark.parametrize("version", ["banana", "latest", "", "0.15.x"])
def test_unreadable_vllm_version_is_a_usage_error(tmp_path: Path, version: str) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    before = snapshot(drafter)
    proc = run_cli(
        "doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", version, "--fix",
    )  # fmt: skip
    assert_refused(proc, 2, f"--vllm-version {version!r} is not a vLLM release version")
    assert proc.stdout == ""
    assert snapshot(drafter) == before


def test_a_bad_vllm_version_is_named_before_missing_model_files(tmp_path: Path) -> None:
    proc = run_cli(
        "doctor", "--model", str(tmp_path / "nope"), "--drafter", str(tmp_path / "nope"),
        "--vllm-version", "banana",
    )  # fmt: skip
    assert_refused(proc, 2, "'banana'")


def test_a_bad_vllm_version_with_json_is_still_exit_2(tmp_path: Path) -> None:
    proc = run_cli(
        "--json", "doctor", "--model", str(kimi_target(tmp_path)),
        "--drafter", str(specforge_drafter(tmp_path)), "--vllm-version", "banana",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout) == {
        "schema": "vllm-patcher/1",
        "command": "doctor",
        "ok": False,
        "exit_code": 2,
        "error": "--vllm-version 'banana' is not a vLLM release version (like 0.15.1)",
    }


@pytest.mark.parametrize(("size", "problems"), [("2", 1), ("1", 0)])
def test_pipeline_parallelism_above_one_is_a_problem_before_0_30(
    tmp_path: Path, size: str, problems: int
) -> None:
    drafter = specforge_drafter(
        tmp_path, vocab=DEEPSEEK_VOCAB, nested=[1, 29, 57], weights=drafter_weights(),
        **{KEY: [2, 30, 58]},
    )  # fmt: skip
    code, data = doctor_json(
        "--model", str(deepseek_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.15.1", "--pipeline-parallel-size", size,
    )  # fmt: skip
    found = [f for f in data["findings"] if f["check"] == "pipeline"]
    assert (code, data["problems"], len(found)) == (int(bool(problems)), problems, problems)
    if problems:
        assert found[0]["level"] == "problem"
        assert "captured on an earlier pipeline stage" in found[0]["message"]
        assert found[0]["fix"].startswith("serve with --pipeline-parallel-size 1")
