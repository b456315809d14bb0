"""doctor's check(): the findings on hand-written configs and safetensors, what --fix knows and what it guesses, swapped --model and --drafter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_patcher.doctor import (
    PROBLEM,
    WARNING,
    reads_top_level_key,
    speculative_config,
)
from vllm_patcher.errors import BadSetting

from ..conftest import run_cli
from ..models.model_files import (
    DEEPSEEK_VOCAB,
    HIDDEN,
    KEY,
    KIMI_VOCAB,
    deepseek_target,
    drafter_weights,
    kimi_target,
    specforge_drafter,
    write_safetensors,
)
from .reports import by_check, check, doctor_json, run

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
    # a DeepSeek-V3 target, which 0.11.0 loads: the aux layers alone ask for 0.11.1 (a Kimi-K2.5
    # target's fixes name 0.15.0, its model's first release: test_release_range.py)
    drafter = specforge_drafter(
        tmp_path, vocab=DEEPSEEK_VOCAB, nested=[2, 30, 58], weights=drafter_weights()
    )
    report = check(deepseek_target(tmp_path), drafter, "0.11.0")
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
