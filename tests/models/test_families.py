"""Target families doctor knows besides DeepSeek and Kimi: MiniMax-M2 and Granite."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_patcher.doctor import OK, PROBLEM, WARNING

from ..doctor.reports import by_check, check, doctor_json
from .model_files import (
    DEEPSEEK_VOCAB,
    HIDDEN,
    KIMI_VOCAB,
    drafter_weights,
    minimax_drafter,
    minimax_target,
    specforge_drafter,
    write_json,
)

# --- MiniMax-M2 targets -----------------------------------------------------------------------------


def test_a_minimax_m2_target_is_known_and_gets_the_default_aux_layers(tmp_path: Path) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), "0.15.1")
    assert report.ok and not report.warnings, report.findings
    assert by_check(report, "target") == [
        ("ok", "minimax_m2 target: 62 layers, hidden size 3072, vocab 200064")
    ]
    assert report.aux.vllm_ids == (2, 31, 59) and report.aux.source == "default"
    assert by_check(report, "hidden-size") == [
        ("ok", "drafter hidden_size 3072 = target hidden size")
    ]


def test_a_drafter_for_deepseek_does_not_fit_a_minimax_m2_target(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, vocab=DEEPSEEK_VOCAB, weights=drafter_weights())
    report = check(minimax_target(tmp_path), drafter, "0.15.1")
    assert {f.check for f in report.problems} == {"hidden-size", "fc-weight", "vocab"}


@pytest.mark.parametrize(
    ("version", "loads"), [("0.11.0", False), ("0.11.1", True), ("0.19.1", True)]
)
def test_a_minimax_m2_target_needs_a_release_that_has_its_model(
    tmp_path: Path, version: str, loads: bool
) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), version)
    target_problems = [f for f in report.problems if f.check == "target"]
    if loads:
        assert report.ok, report.findings
    else:
        (problem,) = target_problems
        assert "cannot load a MiniMax-M2 target" in problem.message
        assert "arrived in vLLM 0.11.1" in problem.message
        assert problem.fix and problem.fix.startswith("serve it with vLLM 0.11.1 or newer")


def test_minimax_m2_on_a_release_before_0_11_0_names_its_own_range(tmp_path: Path) -> None:
    code, data = doctor_json(
        "--model", str(minimax_target(tmp_path)), "--drafter", str(minimax_drafter(tmp_path)),
        "--vllm-version", "0.10.2",
    )  # fmt: skip
    assert code == 1 and data["problems"] == 2
    release, target = [f for f in data["findings"] if f["level"] == PROBLEM]
    assert release["check"] == "vllm-release" and target["check"] == "target"
    assert "cannot serve EAGLE-3 for a MiniMax-M2 target" in release["message"]
    assert "it patches 0.11.1 up to (not including) 0.20.0" in release["message"]
    assert "eagle3-minimax-m2 >=0.11.1" in release["message"]
    assert release["fix"].startswith("upgrade vLLM to 0.11.1 or newer (0.20.0 and newer need no")


def test_an_unknown_target_family_is_a_warning_pointing_at_the_list(tmp_path: Path) -> None:
    target = write_json(
        tmp_path / "gpt" / "config.json",
        {"model_type": "gpt2", "hidden_size": HIDDEN, "num_hidden_layers": 12, "vocab_size": 1024},
    ).parent
    drafter = specforge_drafter(tmp_path, vocab=1024, weights=drafter_weights())
    ((level, message),) = by_check(check(target, drafter, "0.15.1"), "target")
    assert level == WARNING and "'gpt2' is of no family vllm-patcher has a patch for" in message
    assert "(vllm-patcher list)" in message


# --- Granite targets --------------------------------------------------------------------------------


def granite_target(root: Path, model_type: str = "granite") -> Path:
    write_json(
        root / model_type / "config.json",
        {
            "architectures": ["GraniteForCausalLM"],
            "model_type": model_type,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 40,
            "vocab_size": KIMI_VOCAB,
        },
    )
    return root / model_type


def test_a_granite_target_is_known_and_gets_the_default_aux_layers(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights())
    report = check(granite_target(tmp_path), drafter, "0.31.0")
    assert by_check(report, "target") == [
        ("ok", f"granite target: 40 layers, hidden size {HIDDEN}, vocab {KIMI_VOCAB}")
    ]
    assert report.aux.vllm_ids == (2, 20, 37) and report.aux.source == "default"
    assert not [f for f in report.problems if f.check == "vllm-release"]


def test_granite_on_a_release_before_0_11_0_names_eagle3_granite_and_its_range(
    tmp_path: Path,
) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights())
    code, data = doctor_json(
        "--model", str(granite_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.10.2"
    )  # fmt: skip
    assert code == 1
    (release,) = [f for f in data["findings"] if f["check"] == "vllm-release"]
    assert (
        release["level"] == PROBLEM
        and "cannot serve EAGLE-3 for a Granite target" in release["message"]
    )
    assert "eagle3-granite" in release["message"] and "0.32.0" in release["message"]


def test_granitemoe_is_not_taken_for_granite(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights())
    report = check(granite_target(tmp_path, "granitemoe"), drafter, "0.31.0")
    (target,) = by_check(report, "target")
    # its own family (eagle3-granitemoe), not Granite's
    assert target[0] == OK and target[1].startswith("Granite MoE target (granitemoe, "), target
    assert "eagle3-granitemoe" in target[1] and "eagle3-granite)" not in target[1]
