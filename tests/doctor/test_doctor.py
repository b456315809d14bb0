"""doctor and serve-args: drafter <-> target preflight on hand-written configs and safetensors."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import vllm_patcher
from vllm_patcher import doctor
from vllm_patcher.doctor import (
    PROBLEM,
    WARNING,
    aux_layer_plan,
    check,
    default_aux_layers,
    read_safetensors_header,
    read_target,
    reads_nested_key,
    reads_top_level_key,
    run,
    speculative_config,
)
from vllm_patcher.errors import BadSetting

from ..conftest import assert_refused, copy_builtins, run_cli, snapshot, test_venv_python

HIDDEN = 7168
LAYERS = 61
DEEPSEEK_VOCAB = 129280
KIMI_VOCAB = 163840
DRAFT_VOCAB = 32000
MINIMAX_HIDDEN = 3072
MINIMAX_LAYERS = 62
MINIMAX_VOCAB = 200064
KEY = "eagle_aux_hidden_state_layer_ids"
DTYPE_BYTES = {"BF16": 2, "I64": 8, "BOOL": 1, "F32": 4}


# --- fixtures written by hand ----------------------------------------------------------------------


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None
) -> None:
    """A real safetensors file: length, JSON header, then zero bytes (sparse) for every tensor."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = DTYPE_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)


def deepseek_target(root: Path) -> Path:
    write_json(
        root / "DeepSeek-V3" / "config.json",
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "vocab_size": DEEPSEEK_VOCAB,
            "first_k_dense_replace": 3,
        },
    )
    return root / "DeepSeek-V3"


def kimi_target(root: Path) -> Path:
    write_json(
        root / "Kimi-K2.5" / "config.json",
        {
            "architectures": ["KimiK25ForConditionalGeneration"],
            "model_type": "kimi_k25",
            "media_placeholder_token_id": 163605,
            "text_config": {
                "model_type": "deepseek_v3",
                "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS,
                "vocab_size": KIMI_VOCAB,
            },
            "vision_config": {"hidden_size": 1152},
        },
    )
    return root / "Kimi-K2.5"


def minimax_target(root: Path) -> Path:
    """MiniMax-M2's config.json as the checkpoint ships it: flat, its config class via auto_map."""
    write_json(
        root / "MiniMax-M2" / "config.json",
        {
            "architectures": ["MiniMaxM2ForCausalLM"],
            "model_type": "minimax_m2",
            "auto_map": {"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config"},
            "hidden_size": MINIMAX_HIDDEN,
            "num_hidden_layers": MINIMAX_LAYERS,
            "vocab_size": MINIMAX_VOCAB,
            "num_local_experts": 256,
        },
    )
    return root / "MiniMax-M2"


def drafter_weights(
    names: str = "midlayer", d2t: bool = True, t2d: bool = True, fc_in: int = 3 * HIDDEN
) -> dict[str, tuple[str, list[int]]]:
    tensors: dict[str, tuple[str, list[int]]] = {
        "fc.weight": ("BF16", [HIDDEN, fc_in]),
        f"{names}.hidden_norm.weight": ("BF16", [HIDDEN]),
        f"{names}.input_layernorm.weight": ("BF16", [HIDDEN]),
        "norm.weight": ("BF16", [HIDDEN]),
    }
    if d2t:
        tensors["d2t"] = ("I64", [DRAFT_VOCAB])
    if t2d:
        tensors["t2d"] = ("BOOL", [KIMI_VOCAB])
    return tensors


def specforge_drafter(
    root: Path,
    name: str = "drafter",
    vocab: int = KIMI_VOCAB,
    nested: list[int] | None = None,
    weights: dict[str, tuple[str, list[int]]] | None = None,
    **overrides: Any,
) -> Path:
    """A drafter config the way SpecForge exports one: aux ids nested, in SGLang's convention."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 64,
        "vocab_size": vocab,
        "draft_vocab_size": DRAFT_VOCAB,
    }
    if nested is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": nested}
    for key, value in overrides.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    write_json(root / name / "config.json", config)
    if weights is not None:
        write_safetensors(root / name / "model.safetensors", weights)
    return root / name


def doctor_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("--json", "doctor", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_check(report: doctor.DoctorReport | dict[str, Any], name: str) -> list[tuple[str, str]]:
    findings = report["findings"] if isinstance(report, dict) else report.to_dict()["findings"]
    assert isinstance(findings, list)
    return [(f["level"], f["message"]) for f in findings if f["check"] == name]


# --- the release rules, as pure functions -----------------------------------------------------------


def test_default_aux_layers_for_61_layers() -> None:
    assert default_aux_layers(LAYERS) == (2, 30, 58)


@pytest.mark.parametrize(
    ("version", "top", "nested"),
    [
        ("0.11.0", False, False),
        ("0.11.1", True, False),
        ("0.15.1", True, False),
        ("0.15.1+cu129", True, False),
        ("0.21.3", True, False),
        ("0.22.0rc1", True, True),
        ("0.22.0", True, True),
        ("1.0.0", True, True),
    ],
)
def test_which_keys_each_release_reads(version: str, top: bool, nested: bool) -> None:
    assert reads_top_level_key(version) is top
    assert reads_nested_key(version) is nested


def test_kimi_nested_ids_are_ignored_before_0_22_and_read_unshifted_after() -> None:
    config = {"eagle_config": {KEY: [2, 30, 58]}}
    for version in ("0.11.0", "0.15.1", "0.21.0"):
        plan = aux_layer_plan(config, LAYERS, version)
        assert (plan.vllm_ids, plan.source) == ((2, 30, 58), "default")
        assert plan.output_ids == (1, 29, 57)
        assert plan.trained_ids == (3, 31, 59)
    assert aux_layer_plan(config, LAYERS, "0.15.1").write_ids == (3, 31, 59)
    # 0.11.0 reads no key at all: writing one would change nothing
    assert aux_layer_plan(config, LAYERS, "0.11.0").write_ids is None
    plan = aux_layer_plan(config, LAYERS, "0.22.0")
    assert (plan.vllm_ids, plan.source, plan.write_ids) == ((2, 30, 58), "nested", (3, 31, 59))


def test_top_level_key_wins_from_0_11_1() -> None:
    config = {KEY: [3, 31, 59], "eagle_config": {KEY: [2, 30, 58]}}
    plan = aux_layer_plan(config, LAYERS, "0.15.1")
    assert (plan.vllm_ids, plan.source, plan.write_ids) == ((3, 31, 59), "top-level", None)
    assert plan.output_ids == (2, 30, 58)
    assert aux_layer_plan(config, LAYERS, "0.22.0").source == "top-level"
    assert aux_layer_plan(config, LAYERS, "0.11.0").source == "default"


def test_empty_or_malformed_top_level_key_means_default() -> None:
    for value in ([], "2,30,58", [2.0, 30, 58], [True, 30, 58]):
        plan = aux_layer_plan({KEY: value}, LAYERS, "0.15.1")
        assert (plan.vllm_ids, plan.source) == ((2, 30, 58), "default")


def test_read_target_uses_kimi_text_config(tmp_path: Path) -> None:
    target = read_target(kimi_target(tmp_path))
    assert (target.model_type, target.text_model_type) == ("kimi_k25", "deepseek_v3")
    assert (target.hidden_size, target.num_layers, target.vocab_size) == (HIDDEN, 61, KIMI_VOCAB)


def test_read_target_takes_top_level_vocab_when_text_config_lacks_it(tmp_path: Path) -> None:
    root = kimi_target(tmp_path)
    config = json.loads((root / "config.json").read_text())
    del config["text_config"]["vocab_size"]
    config["vocab_size"] = 163841
    write_json(root / "config.json", config)
    assert read_target(root).vocab_size == 163841


def test_safetensors_header_is_read_without_torch(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, drafter_weights(), metadata={"format": "pt", "producer": "SpecForge"})
    tensors = read_safetensors_header(path)
    assert "__metadata__" not in tensors
    assert tensors["fc.weight"].shape == (HIDDEN, 3 * HIDDEN)
    assert tensors["fc.weight"].dtype == "BF16"
    assert tensors["d2t"].shape == (DRAFT_VOCAB,)
    assert set(tensors) == set(drafter_weights())


# --- check(): the findings --------------------------------------------------------------------------


def test_kimi_k25_specforge_drafter_on_0_15_1_needs_the_shifted_top_level_key(
    tmp_path: Path,
) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert not report.ok
    (problem,) = report.problems
    assert problem.check == "aux-layers"
    assert problem.message == (
        "vLLM 0.15.1 ignores eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] "
        "(SpecForge layer outputs = vLLM [3, 31, 59]) and uses its default [2, 30, 58] = "
        "outputs of layers 1, 29, 57, one layer earlier than the drafter was trained on"
    )
    assert problem.fix == (
        f'add "eagle_aux_hidden_state_layer_ids": [3, 31, 59] at the top level of '
        f"{drafter / 'config.json'} (vllm-patcher doctor --fix writes it)"
    )
    assert report.aux.to_dict() == {
        "vllm_ids": [2, 30, 58],
        "sglang_ids": [1, 29, 57],
        "source": "default",
        "default": [2, 30, 58],
        "top_level": None,
        "nested": [2, 30, 58],
        "trained_vllm_ids": [3, 31, 59],
        "fix_top_level": [3, 31, 59],
        "fix_basis": "known",
        "fix_based_on": "the drafter's eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58], "
        "SpecForge layer outputs, +1 into vLLM's convention",
    }


def test_deepseek_specforge_ids_equal_the_default_so_the_ignored_key_is_only_a_warning(
    tmp_path: Path,
) -> None:
    drafter = specforge_drafter(
        tmp_path, vocab=DEEPSEEK_VOCAB, nested=[1, 29, 57], weights=drafter_weights()
    )
    report = check(deepseek_target(tmp_path), drafter, "0.15.1")
    assert report.ok
    assert report.aux.vllm_ids == (2, 30, 58)
    ((level, message),) = by_check(report, "aux-layers")
    assert level == WARNING
    assert "happens to be the layers the drafter was trained on" in message
    assert report.aux.write_ids == (2, 30, 58)


def test_on_0_11_0_the_drafter_gets_the_default_whatever_it_declares(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    report = check(kimi_target(tmp_path), drafter, "0.11.0")
    assert (report.aux.vllm_ids, report.aux.source) == ((2, 30, 58), "default")
    (problem,) = [p for p in report.problems if p.check == "aux-layers"]
    assert "reads no aux-layer key" in problem.message
    assert problem.fix is not None and "upgrade to vLLM 0.11.1 or newer" in problem.fix
    assert "[3, 31, 59]" in problem.fix
    assert report.aux.write_ids is None


def test_on_0_22_the_nested_key_is_read_one_layer_early(tmp_path: Path) -> None:
    # the same effect as on 0.15.1 (vLLM feeds the drafter the layers one earlier than it was
    # trained on), reached another way: the same severity, a problem
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    report = check(kimi_target(tmp_path), drafter, "0.22.0")
    assert not report.ok
    assert (report.aux.vllm_ids, report.aux.source) == ((2, 30, 58), "nested")
    ((level, message),) = by_check(report, "aux-layers")
    assert level == PROBLEM
    assert "unshifted" in message and "one layer earlier" in message
    assert report.aux.write_ids == (3, 31, 59)


def test_top_level_key_already_present_passes(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, nested=[2, 30, 58], weights=drafter_weights(), **{KEY: [3, 31, 59]}
    )
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert report.ok and not report.warnings
    assert (report.aux.vllm_ids, report.aux.source) == ((3, 31, 59), "top-level")
    assert report.aux.output_ids == (2, 30, 58)


def test_top_level_key_copied_unshifted_from_the_nested_one_is_flagged(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, nested=[2, 30, 58], weights=drafter_weights(), **{KEY: [2, 30, 58]}
    )
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    (warning, used) = by_check(report, "aux-layers")
    assert warning[0] == WARNING and "means vLLM [3, 31, 59]" in warning[1]
    assert used[0] == "ok" and "uses the top-level" in used[1]
    # an explicit top-level key is the author's word: --fix leaves it alone
    assert report.aux.write_ids is None


def test_aux_id_outside_the_target_is_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: [2, 30, 61]})
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    (problem,) = report.problems
    assert problem.check == "aux-layers" and "outside the target's [0, 61)" in problem.message
    assert report.aux.write_ids == (2, 30, 58)


def test_nested_id_past_the_last_layer_is_a_problem(tmp_path: Path) -> None:
    # SpecForge's 60 is the output of the last layer: vLLM would need layer 61, which is not there
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 60], weights=drafter_weights())
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    (problem,) = report.problems
    assert "[3, 31, 61]" in problem.message and "outside the target's [0, 61)" in problem.message
    assert report.aux.write_ids is None


def test_wrong_architecture_is_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), architectures=["LlamaForCausalLM"]
    )
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert [p.check for p in report.problems] == ["architecture"]
    assert 'set "architectures": ["LlamaForCausalLMEagle3"]' in (report.problems[0].fix or "")


def test_eagle3_llama_architecture_name_is_accepted(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), architectures=["Eagle3LlamaForCausalLM"]
    )
    assert check(kimi_target(tmp_path), drafter, "0.15.1").ok


def test_drafter_for_another_hidden_size_is_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(fc_in=3 * 4096), hidden_size=4096)
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert sorted(p.check for p in report.problems) == ["fc-weight", "hidden-size"]
    fc = next(p for p in report.problems if p.check == "fc-weight")
    assert "[7168, 12288]" in fc.message and "21504" in fc.message


def test_target_hidden_size_is_preferred_over_hidden_size(tmp_path: Path) -> None:
    # a drafter narrower than its target: its fc still takes 3 x the target's hidden size
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), hidden_size=4096, target_hidden_size=HIDDEN
    )
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert report.ok
    assert by_check(report, "hidden-size") == [
        ("ok", "drafter target_hidden_size 7168 = target hidden size")
    ]


def test_wrong_target_hidden_size_with_a_fitting_fc_says_to_fix_the_config(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), target_hidden_size=4096)
    (problem,) = check(kimi_target(tmp_path), drafter, "0.15.1").problems
    assert problem.check == "hidden-size"
    assert problem.fix is not None and '"target_hidden_size": 7168' in problem.fix


def test_vocab_mismatch_is_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, vocab=DEEPSEEK_VOCAB, weights=drafter_weights())
    (problem,) = check(kimi_target(tmp_path), drafter, "0.15.1").problems
    assert problem.check == "vocab"
    assert "129280" in problem.message and "163840" in problem.message


def test_small_draft_vocab_without_d2t_is_a_problem(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(d2t=False, t2d=False))
    (problem,) = check(kimi_target(tmp_path), drafter, "0.15.1").problems
    assert problem.check == "draft-vocab" and "no d2t" in problem.message


def test_missing_t2d_is_a_warning_because_vllm_skips_it(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(t2d=False))
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert report.ok
    assert by_check(report, "draft-vocab")[0][0] == WARNING


def test_full_draft_vocab_needs_no_mapping(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(d2t=False, t2d=False), draft_vocab_size=KIMI_VOCAB
    )
    assert check(kimi_target(tmp_path), drafter, "0.15.1").ok


def test_without_safetensors_the_mapping_cannot_be_checked(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path)
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert report.ok
    ((level, message),) = by_check(report, "draft-vocab")
    assert level == WARNING and "cannot check" in message and "no safetensors" in message
    assert by_check(report, "weight-names")[0][0] == WARNING


@pytest.mark.parametrize("style", ["layers.0", "midlayer"])
def test_weight_naming_is_reported(tmp_path: Path, style: str) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(names=style))
    ((level, message),) = by_check(check(kimi_target(tmp_path), drafter, "0.15.1"), "weight-names")
    assert level == "ok" and f"{style}.*" in message


def test_unknown_weight_naming_is_a_warning(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(names="model.layers.0"))
    ((level, _),) = by_check(check(kimi_target(tmp_path), drafter, "0.15.1"), "weight-names")
    assert level == WARNING


def test_sharded_weights_are_read_together(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path)
    tensors = drafter_weights()
    write_safetensors(
        drafter / "model-00001-of-00002.safetensors", {"fc.weight": tensors["fc.weight"]}
    )
    write_safetensors(
        drafter / "model-00002-of-00002.safetensors",
        {k: v for k, v in tensors.items() if k != "fc.weight"},
    )
    report = check(kimi_target(tmp_path), drafter, "0.15.1")
    assert len(report.drafter.tensors) == len(tensors)
    assert by_check(report, "fc-weight")[0][0] == "ok"


def test_run_with_fix_writes_the_key_and_checks_again(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    report = run(kimi_target(tmp_path), drafter, "0.15.1", fix=True)
    assert report.ok and report.fix is not None
    assert report.fix.ids == (3, 31, 59)
    assert report.aux.source == "top-level"


def test_check_refuses_unreadable_version() -> None:
    with pytest.raises(BadSetting):
        reads_top_level_key("latest")


def test_serve_args_config_is_absolute(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path)
    assert speculative_config(drafter, 4) == {
        "method": "eagle3",
        "model": str(drafter),
        "num_speculative_tokens": 4,
    }


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


# --- releases vllm-patcher cannot patch ------------------------------------------------------------


def consistent_deepseek_pair(root: Path) -> tuple[str, ...]:
    """A DeepSeek-V3 target and a drafter that fits it on every release from 0.11.0."""
    drafter = specforge_drafter(root, vocab=DEEPSEEK_VOCAB, weights=drafter_weights())
    return ("--model", str(deepseek_target(root)), "--drafter", str(drafter))


@pytest.mark.parametrize("version", ["0.9.0", "0.10.2", "0.10.1.1", "0.10.2+cpu"])
def test_a_release_before_0_11_0_is_a_problem(tmp_path: Path, version: str) -> None:
    proc = run_cli("doctor", *consistent_deepseek_pair(tmp_path), "--vllm-version", version)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.split()[:1] == ["problem"]]
    assert lines[index].split()[1] == "vllm-release"
    assert f"vLLM {version} is older than 0.11.0" in lines[index]
    assert "vllm-patcher cannot patch it" in lines[index]
    assert "fix: upgrade vLLM to 0.11.0 or newer" in lines[index + 1]
    assert lines[-1] == "doctor: 1 problem, 0 warnings"


def test_a_release_before_0_11_0_is_a_problem_in_json(tmp_path: Path) -> None:
    code, data = doctor_json(*consistent_deepseek_pair(tmp_path), "--vllm-version", "0.9.0")
    assert code == 1 and data["ok"] is False and data["problems"] == 1
    (problem,) = [f for f in data["findings"] if f["level"] == PROBLEM]
    assert problem["check"] == "vllm-release"
    assert "cannot patch" in problem["message"]
    # read from the patch folders: both DeepSeek patches start at 0.11.0 and are upstream at 0.18.0
    assert "it patches 0.11.0 up to (not including) 0.18.0" in problem["message"]
    assert "eagle3-whitelist >=0.11.0" in problem["message"]
    assert problem["fix"].startswith("upgrade vLLM to 0.11.0 or newer")


@pytest.mark.parametrize("version", ["0.11.0", "0.11.0rc2", "0.17.1", "0.18.0", "0.22.0", "1.0.0"])
def test_releases_from_0_11_0_are_not_a_release_problem(tmp_path: Path, version: str) -> None:
    # 0.11.0-0.17.x are patchable (apply, too, judges a pre-release by its base release);
    # from 0.18.0 upstream has the changes
    code, data = doctor_json(*consistent_deepseek_pair(tmp_path), "--vllm-version", version)
    assert code == 0, data["findings"]
    assert by_check(data, "vllm-release") == []


def test_old_release_and_kimi_target_are_both_named(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), eagle_aux_hidden_state_layer_ids=[3, 31, 59]
    )
    report = check(kimi_target(tmp_path), drafter, "0.10.2")
    assert [f.check for f in report.problems][:2] == ["vllm-release", "target"]


def test_without_vllm_or_vllm_version_it_refuses_like_other_commands(tmp_path: Path) -> None:
    # the development venv has no vLLM
    proc = run_cli(
        "doctor",
        "--model",
        str(kimi_target(tmp_path)),
        "--drafter",
        str(specforge_drafter(tmp_path)),
    )
    assert_refused(proc, 3, "no vLLM installed", "--vllm-version")


# --- serve-args -------------------------------------------------------------------------------------


def ready_kimi_pair(root: Path) -> tuple[Path, Path]:
    """A Kimi-K2.5 target and a drafter doctor passes on 0.15.1 (top-level key already set)."""
    drafter = specforge_drafter(
        root, nested=[2, 30, 58], weights=drafter_weights(), **{KEY: [3, 31, 59]}
    )
    return kimi_target(root), drafter


def test_serve_args_prints_exactly_the_speculative_config(tmp_path: Path) -> None:
    target, drafter = ready_kimi_pair(tmp_path)
    relative = os.path.relpath(drafter)  # the child runs in this process's directory
    args = ("--model", str(target), "--vllm-version", "0.15.1")
    proc = run_cli("serve-args", *args, "--drafter", relative)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f'{{"method": "eagle3", "model": "{drafter}", "num_speculative_tokens": 3}}\n'
    )
    assert proc.stderr == ""
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


# --- MiniMax-M2 targets -----------------------------------------------------------------------------


def minimax_drafter(root: Path, **overrides: Any) -> Path:
    return specforge_drafter(
        root,
        vocab=MINIMAX_VOCAB,
        hidden_size=MINIMAX_HIDDEN,
        weights=drafter_weights(fc_in=3 * MINIMAX_HIDDEN),
        **overrides,
    )


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
    assert "on a MiniMax-M2 target" in release["message"]
    assert "it patches 0.11.1 up to (not including) 0.20.0" in release["message"]
    assert "eagle3-minimax-m2 >=0.11.1" in release["message"]
    assert release["fix"].startswith("upgrade vLLM to 0.11.1 or newer (0.20.0 and newer need no")


def test_an_unknown_target_family_is_a_warning_naming_both_families(tmp_path: Path) -> None:
    target = write_json(
        tmp_path / "gpt" / "config.json",
        {"model_type": "gpt2", "hidden_size": HIDDEN, "num_hidden_layers": 12, "vocab_size": 1024},
    ).parent
    drafter = specforge_drafter(tmp_path, vocab=1024, weights=drafter_weights())
    ((level, message),) = by_check(check(target, drafter, "0.15.1"), "target")
    assert level == WARNING and "deepseek_v3" in message and "minimax_m2" in message


# --- one severity per effect, whatever the release ----------------------------------------------


def aux_levels(report: doctor.DoctorReport, fragment: str) -> list[str]:
    return [level for level, message in by_check(report, "aux-layers") if fragment in message]


@pytest.mark.parametrize("version", ["0.11.0", "0.15.1", "0.21.0", "0.22.0"])
def test_layers_one_earlier_than_trained_is_a_problem_on_every_release(
    tmp_path: Path, version: str
) -> None:
    # 0.11.0 reads no key, 0.15.1/0.21.0 ignore the nested one, 0.22.0 reads it unshifted: three
    # ways to the same effect, the same severity
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    report = check(kimi_target(tmp_path), drafter, version)
    assert report.aux.vllm_ids == (2, 30, 58)
    assert aux_levels(report, "one layer earlier than the drafter was trained on") == [PROBLEM]


@pytest.mark.parametrize("version", ["0.11.0", "0.15.1", "0.21.0"])
@pytest.mark.parametrize("declared", ["nested", "top-level"])
def test_a_default_that_happens_to_match_is_a_warning_on_every_release(
    tmp_path: Path, version: str, declared: str
) -> None:
    extra: dict[str, Any] = {KEY: [2, 30, 58]} if declared == "top-level" else {}
    drafter = specforge_drafter(
        tmp_path,
        vocab=DEEPSEEK_VOCAB,
        nested=[1, 29, 57] if declared == "nested" else None,
        weights=drafter_weights(),
        **extra,
    )
    report = check(deepseek_target(tmp_path), drafter, version)
    if declared == "top-level" and version != "0.11.0":
        # read as declared: nothing ignored, nothing to warn about
        assert aux_levels(report, "uses the top-level") == ["ok"]
    else:
        assert aux_levels(report, "happens to be the layers the drafter was trained on") == [
            WARNING
        ]
    assert report.ok


@pytest.mark.parametrize("version", ["0.11.0", "0.15.1", "0.22.0"])
def test_disagreeing_top_level_and_nested_ids_are_a_warning_on_every_release(
    tmp_path: Path, version: str
) -> None:
    drafter = specforge_drafter(
        tmp_path, nested=[2, 30, 58], weights=drafter_weights(), **{KEY: [2, 30, 58]}
    )
    report = check(kimi_target(tmp_path), drafter, version)
    assert aux_levels(report, "disagrees with eagle_config") == [WARNING]


@pytest.mark.parametrize("version", ["0.11.0", "0.15.1", "0.22.0"])
def test_a_malformed_top_level_key_is_a_warning_on_every_release(
    tmp_path: Path, version: str
) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: "3,31,59"})
    report = check(kimi_target(tmp_path), drafter, version)
    assert aux_levels(report, "not a non-empty list of layer numbers; vLLM ignores it") == [WARNING]


@pytest.mark.parametrize("version", ["0.15.1", "0.22.0"])
def test_capturing_a_layer_the_target_lacks_is_a_problem_on_every_release_that_reads_the_key(
    tmp_path: Path, version: str
) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: [2, 30, 61]})
    report = check(kimi_target(tmp_path), drafter, version)
    assert aux_levels(report, "outside the target's [0, 61)") == [PROBLEM]


# --- --fix says what it knows and what it guesses -----------------------------------------------


def test_fix_labels_a_guessed_value_as_a_guess_and_keeps_warning(tmp_path: Path) -> None:
    # ids past the target's last layer and no nested key: nothing says which layers the drafter
    # was trained on, so the default --fix writes is a guess
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: [2, 30, 61]})
    args = ("--model", str(kimi_target(tmp_path)), "--drafter", str(drafter))
    before = doctor_json(*args, "--vllm-version", "0.15.1")[1]
    (problem,) = [f for f in before["findings"] if f["level"] == PROBLEM]
    assert "a GUESS, based on vLLM's default (2, n // 2, n - 3)" in problem["fix"]
    assert before["aux_layers"]["fix_basis"] == "guessed"

    proc = run_cli("doctor", *args, "--vllm-version", "0.15.1", "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == (
        "  eagle_aux_hidden_state_layer_ids: [2, 30, 58] (a GUESS, based on vLLM's default "
        "(2, n // 2, n - 3) for the target's 61 layers: the top-level "
        "eagle_aux_hidden_state_layer_ids [2, 30, 61] lies outside [0, 61) and nothing else in "
        "the config names the layers the drafter was trained on)"
    )
    (warning,) = [line for line in lines if line.split()[:2] == ["warning", "fix"]]
    assert (
        "--fix wrote eagle_aux_hidden_state_layer_ids: [2, 30, 58] as a GUESS, based on" in warning
    )
    assert json.loads((drafter / "config.json").read_text())[KEY] == [2, 30, 58]

    # JSON says the same about the value on disk
    (drafter / "config.json").write_bytes((drafter / "config.json.bak").read_bytes())
    code, data = doctor_json(*args, "--vllm-version", "0.15.1", "--fix")
    assert code == 0 and data["warnings"] == 1
    (written,) = data["fix"]["written"]
    assert written["key"] == KEY and written["value"] == [2, 30, 58]
    assert written["basis"] == "guessed" and "outside [0, 61)" in written["based_on"]


def test_fix_labels_a_value_read_from_the_drafter_as_known(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, nested=[2, 30, 58], weights=drafter_weights())
    code, data = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter),
        "--vllm-version", "0.15.1", "--fix",
    )  # fmt: skip
    assert code == 0 and data["warnings"] == 0
    (written,) = data["fix"]["written"]
    assert (written["value"], written["basis"]) == ([3, 31, 59], "known")
    assert "eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58]" in written["based_on"]


# --- swapped --model and --drafter --------------------------------------------------------------


def test_swapped_model_and_drafter_are_named(tmp_path: Path) -> None:
    target = deepseek_target(tmp_path)
    drafter = specforge_drafter(tmp_path, vocab=DEEPSEEK_VOCAB, weights=drafter_weights())
    args = ("--model", str(drafter), "--drafter", str(target), "--vllm-version", "0.15.1")
    proc = run_cli("doctor", *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split()[:2] == ["problem", "roles"]
    assert "--model and --drafter look swapped" in lines[1]
    assert f'--model {drafter} (architectures ["LlamaForCausalLMEagle3"]' in lines[1]
    assert f'--drafter {target} (architectures ["DeepseekV3ForCausalLM"], ' in lines[1]
    assert "model_type deepseek_v3, 61 layers) like a target model" in lines[1]
    assert lines[2].split("fix: ")[1] == f"swap them: --model {target} --drafter {drafter}"
    assert lines[-1] == "doctor: 1 problem, 0 warnings"
    assert "[2, 0, -2]" not in proc.stdout and "aux layers" not in proc.stdout

    code, data = doctor_json(*args)
    assert code == 1 and [f["check"] for f in data["findings"]] == ["roles"]
    assert data["target"] is None and data["aux_layers"] is None
    # swapped back, the same pair is fine
    assert run_cli("doctor", "--model", str(target), "--drafter", str(drafter),
                   "--vllm-version", "0.15.1").returncode == 0  # fmt: skip


def test_a_drafter_given_as_the_model_is_named_even_when_both_are_drafters(
    tmp_path: Path,
) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: [3, 31, 59]})
    code, data = doctor_json(
        "--model", str(drafter), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    assert code == 1
    ((level, message),) = by_check(data, "roles")
    assert level == PROBLEM
    assert f"--model {drafter} (architectures" in message
    assert "looks like an EAGLE-3 drafter, not a target model" in message
    assert "model_type llama, 1 layer)" in message


# --- releases: read from the patch folders ------------------------------------------------------


@pytest.mark.parametrize("version", ["0.20.0", "0.25.0", "1.0.0"])
def test_minimax_m2_at_or_past_fixed_in_is_upstream_not_a_release_problem(
    tmp_path: Path, version: str
) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), version)
    assert report.ok and by_check(report, "vllm-release") == []


def test_minimax_m2_on_0_11_0_is_outside_what_apply_patches(tmp_path: Path) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), "0.11.0")
    ((level, message),) = by_check(report, "vllm-release")
    assert level == PROBLEM and "vLLM 0.11.0 is older than 0.11.1" in message


def test_the_supported_range_comes_from_the_patch_folders(tmp_path: Path) -> None:
    pins, env = copy_builtins(tmp_path / "copy")
    toml = pins / "supports-eagle3" / "patch.toml"
    toml.write_text(toml.read_text().replace('releases = ">=0.11.0"', 'releases = ">=0.12.0"'))
    args = (*consistent_deepseek_pair(tmp_path), "--vllm-version", "0.11.0")
    assert run_cli("doctor", *args).returncode == 0
    proc = run_cli("doctor", *args, env=env)
    assert proc.returncode == 1, proc.stdout
    assert "vLLM 0.11.0 is older than 0.12.0" in proc.stdout
    assert "supports-eagle3 >=0.12.0" in proc.stdout


# --- Hugging Face repo ids, from the local cache ------------------------------------------------


class StandInHub:
    """A local stand-in for the Hugging Face Hub, serving the requests hf_hub_download makes:
    ``HEAD`` and ``GET {endpoint}/{repo}/resolve/{revision}/{file}``, answered with the headers it
    reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``). Every request is logged."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, body: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                    data = repos.get(repo, {}).get(name)
                    if data is not None:
                        self.send_response(200)
                        commit = hashlib.sha1(repo.encode()).hexdigest()
                        self.send_header("X-Repo-Commit", commit)
                        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        if body:
                            self.wfile.write(data)
                        return
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                self.answer(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self.answer(body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hub_download(hf_home: Path, endpoint: str, repo: str, *files: str) -> None:
    """Put ``files`` of ``repo`` into the cache at ``hf_home`` with huggingface_hub's own
    hf_hub_download (this interpreter's), from the stand-in endpoint."""
    script = (
        "import sys\nfrom huggingface_hub import hf_hub_download\n"
        "for name in sys.argv[2:]:\n    hf_hub_download(sys.argv[1], name)\n"
    )
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_HUB_CACHE", None)
    subprocess.run([sys.executable, "-c", script, repo, *files], env=env, check=True, timeout=300)


def hub_files(config_path: Path, weights: Path | None = None) -> dict[str, bytes]:
    files = {"config.json": config_path.read_bytes()}
    if weights is not None:
        files["model.safetensors"] = weights.read_bytes()
    return files


@pytest.fixture
def hf_cache(tmp_path: Path) -> Iterator[tuple[Path, StandInHub, dict[str, str]]]:
    """A Hugging Face cache (HF_HOME) holding moonshotai/Kimi-K2.5's config.json and a drafter's
    config and weights, put there by huggingface_hub's own downloads from a local stand-in hub.

    No test may reach the real Hugging Face Hub; the stand-in answers the same requests, so the
    cache layout is huggingface_hub's own, not one written by hand.
    """
    source = tmp_path / "source"
    target, drafter = ready_kimi_pair(source)
    hub = StandInHub(
        {
            "moonshotai/Kimi-K2.5": hub_files(target / "config.json"),
            "lab/Kimi-K2.5-eagle3": hub_files(
                drafter / "config.json", drafter / "model.safetensors"
            ),
        }
    )
    hf_home = tmp_path / "hf-home"
    hub_download(hf_home, hub.endpoint, "moonshotai/Kimi-K2.5", "config.json")
    hub_download(hf_home, hub.endpoint, "lab/Kimi-K2.5-eagle3", "config.json", "model.safetensors")
    hub.requests.clear()
    # the endpoint stays set and reachable: a request from doctor would show in hub.requests
    env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": ""}
    try:
        yield hf_home, hub, env
    finally:
        hub.close()


def test_repo_ids_resolve_from_the_local_cache_offline(
    hf_cache: tuple[Path, StandInHub, dict[str, str]], tmp_path: Path
) -> None:
    """doctor and serve-args find both repo ids in the cache the stand-in hub filled, through
    huggingface_hub, without a single request to the hub."""
    hf_home, hub, env = hf_cache
    args = ("--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/Kimi-K2.5-eagle3")
    proc = run_cli("--json", "doctor", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    snapshots = hf_home / "hub" / "models--moonshotai--Kimi-K2.5" / "snapshots"
    assert data["target"]["source"]["repo_id"] == "moonshotai/Kimi-K2.5"
    assert Path(data["target"]["path"]).parent == snapshots
    assert data["target"]["num_layers"] == LAYERS and data["target"]["model_type"] == "kimi_k25"
    assert data["drafter"]["source"]["repo_id"] == "lab/Kimi-K2.5-eagle3"
    assert data["drafter"]["weight_files"] == ["model.safetensors"]
    assert data["drafter"]["tensors"] == len(drafter_weights())
    assert data["aux_layers"]["source"] == "top-level"

    # serve-args hands vLLM the repo id, which vllm serve resolves the same way
    proc = run_cli("serve-args", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        '{"method": "eagle3", "model": "lab/Kimi-K2.5-eagle3", "num_speculative_tokens": 3}\n'
    )
    # through another interpreter's huggingface_hub (--python), the same answer
    proc = run_cli("--python", sys.executable, "doctor", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"target moonshotai/Kimi-K2.5 ({snapshots}/" in proc.stdout
    assert hub.requests == []

    # HF_HUB_CACHE, as huggingface_hub reads it, wins over HF_HOME: an empty one has nothing
    proc = run_cli(
        "doctor", *args, "--vllm-version", "0.15.1",
        env={**env, "HF_HUB_CACHE": str(tmp_path / "empty-cache")},
    )  # fmt: skip
    assert_refused(proc, 11, f"not in the local cache {tmp_path / 'empty-cache'}")


def test_a_repo_id_not_in_the_cache_says_how_to_download_it(
    hf_cache: tuple[Path, StandInHub, dict[str, str]],
) -> None:
    hf_home, hub, env = hf_cache
    proc = run_cli(
        "doctor", "--model", "moonshotai/Kimi-K2-Instruct", "--drafter", "lab/Kimi-K2.5-eagle3",
        "--vllm-version", "0.15.1", env=env,
    )  # fmt: skip
    assert_refused(
        proc,
        11,
        "model moonshotai/Kimi-K2-Instruct is not a directory, and the Hugging Face repo "
        f"moonshotai/Kimi-K2-Instruct is not in the local cache {hf_home / 'hub'}",
        "download it with: hf download moonshotai/Kimi-K2-Instruct --include config.json",
    )
    proc = run_cli(
        "serve-args", "--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/other-eagle3",
        "--vllm-version", "0.15.1", env=env,
    )  # fmt: skip
    assert_refused(proc, 11, "download it with: hf download lab/other-eagle3")
    assert proc.stdout == ""
    assert hub.requests == []  # offline: not even a look at the (reachable) hub


def test_an_existing_directory_wins_over_a_repo_id(
    hf_cache: tuple[Path, StandInHub, dict[str, str]], tmp_path: Path
) -> None:
    # a relative directory named like a repo id is the directory, as for vLLM and transformers
    work = tmp_path / "work"
    target, drafter = ready_kimi_pair(work / "moonshotai")
    _, hub, env = hf_cache
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--json", "doctor",
         "--model", "moonshotai/Kimi-K2.5", "--drafter", "moonshotai/drafter",
         "--vllm-version", "0.15.1"],
        capture_output=True, text=True, cwd=work, check=False, timeout=300,
        env={**os.environ, **env, "PYTHONPATH": str(Path(vllm_patcher.__file__).parent.parent)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["target"]["source"] == {
        "given": "moonshotai/Kimi-K2.5",
        "path": "moonshotai/Kimi-K2.5",
        "repo_id": None,
    }
    assert (work / data["drafter"]["path"]).resolve() == drafter.resolve()
    assert target.is_dir() and hub.requests == []


def test_a_path_that_is_not_a_repo_id_is_still_a_missing_directory(tmp_path: Path) -> None:
    proc = run_cli(
        "doctor", "--model", "./no/such/dir", "--drafter", str(specforge_drafter(tmp_path)),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, "model directory no/such/dir does not exist")


def test_a_repo_id_resolves_through_the_vllm_venvs_own_huggingface_hub(
    hf_cache: tuple[Path, StandInHub, dict[str, str]],
) -> None:
    """The real vLLM 0.15.1 venv, only read (its release, its huggingface_hub): what
    ``vllm-patcher --python VENV doctor`` does on a serving host, with no --vllm-version."""
    python = test_venv_python()
    hf_home, hub, env = hf_cache
    proc = run_cli(
        "--python", str(python), "--json", "doctor",
        "--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/Kimi-K2.5-eagle3", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["vllm_version"] == "0.15.1"
    assert data["target"]["source"]["repo_id"] == "moonshotai/Kimi-K2.5"
    assert data["target"]["path"].startswith(str(hf_home / "hub" / "models--moonshotai--Kimi-K2.5"))
    assert hub.requests == []


def test_fix_never_edits_a_hugging_face_cache_entry(tmp_path: Path) -> None:
    """--fix on a drafter that is a cached repo id: refused with the way out, the cache unchanged
    (its config.json is huggingface_hub's link into the blob store)."""
    source = tmp_path / "source"
    target = kimi_target(source)
    drafter = specforge_drafter(source, nested=[2, 30, 58], weights=drafter_weights())
    hub = StandInHub(
        {
            "moonshotai/Kimi-K2.5": hub_files(target / "config.json"),
            "lab/needs-fix-eagle3": hub_files(
                drafter / "config.json", drafter / "model.safetensors"
            ),
        }
    )
    hf_home = tmp_path / "hf-home"
    try:
        hub_download(hf_home, hub.endpoint, "moonshotai/Kimi-K2.5", "config.json")
        hub_download(
            hf_home, hub.endpoint, "lab/needs-fix-eagle3", "config.json", "model.safetensors"
        )
        env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": ""}
        args = ("--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/needs-fix-eagle3")
        before = snapshot(hf_home)
        # without --fix, doctor names what --fix would write (there is something to fix)
        proc = run_cli("doctor", *args, "--vllm-version", "0.15.1", env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        proc = run_cli("doctor", *args, "--vllm-version", "0.15.1", "--fix", env=env)
        assert_refused(
            proc, 2, "lab/needs-fix-eagle3 is a Hugging Face cache entry",
            "hf download lab/needs-fix-eagle3 --local-dir DIR",
        )  # fmt: skip
        assert snapshot(hf_home) == before
    finally:
        hub.close()


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
    assert release["level"] == PROBLEM and "on a Granite target" in release["message"]
    assert "eagle3-granite" in release["message"] and "0.32.0" in release["message"]


def test_granitemoe_is_not_taken_for_granite(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights())
    report = check(granite_target(tmp_path, "granitemoe"), drafter, "0.31.0")
    (target,) = by_check(report, "target")
    assert target[0] == WARNING and "'granitemoe' is neither" in target[1]
