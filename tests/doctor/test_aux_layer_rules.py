"""Which aux-layer key each release reads, as pure functions, and one severity per effect whatever the release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_patcher import doctor
from vllm_patcher.doctor import (
    PROBLEM,
    WARNING,
    aux_layer_plan,
    default_aux_layers,
    reads_nested_key,
    reads_top_level_key,
)

from ..models.model_files import (
    DEEPSEEK_VOCAB,
    KEY,
    LAYERS,
    deepseek_target,
    drafter_weights,
    kimi_target,
    specforge_drafter,
)
from .reports import by_check, check

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
