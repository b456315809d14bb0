"""vLLM's own faults measured on a GPU (doctor/faults.py): doctor and serve-args warn before the
load, only for the target class and releases they hit; the serve flags that avoid one are read as
vLLM reads them."""

from __future__ import annotations

import pytest

from vllm_patcher.doctor import faults

GRANITE = faults.GRANITE_DRAFTER_GRAPHS


@pytest.mark.parametrize(
    ("version", "hit"),
    [("0.21.0", False), ("0.22.0", True), ("0.25.0", True), ("0.31.0", True), ("0.32.0", False)],
)
def test_the_granite_fault_hits_the_releases_whose_default_is_the_v2_runner(
    version: str, hit: bool
) -> None:
    assert bool(faults.known("GraniteForCausalLM", version)) is hit
    assert bool(faults.findings("granite", version)) is hit


def test_other_targets_and_granite_moe_are_not_warned() -> None:
    assert faults.known("LlamaForCausalLM", "0.25.0") == []
    assert faults.findings("granitemoe", "0.25.0") == []
    assert faults.findings("deepseek_v3", "0.25.0") == []


def test_the_finding_is_a_warning_naming_vllm_the_measurement_and_the_workaround() -> None:
    (finding,) = faults.findings("granite", "0.25.0")
    assert finding.level == "warning" and finding.check == "engine-fault"
    assert "a fault of vLLM, not of the patch" in finding.message
    assert "measured on vLLM 0.25.0 on an H200" in finding.message
    assert finding.fix is not None and faults.PIECEWISE_FLAG in finding.fix


@pytest.mark.parametrize(
    ("args", "env", "avoided"),
    [
        ([], {}, False),
        (["--enforce-eager"], {}, True),
        (["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'], {}, True),
        (['--compilation-config={"cudagraph_mode": "piecewise"}'], {}, True),
        (["-cc", '{"cudagraph_mode": "NONE"}'], {}, True),
        (["-cc.cudagraph_mode=PIECEWISE"], {}, True),
        (["-cc.cudagraph_mode", "FULL_AND_PIECEWISE"], {}, False),
        (["--compilation-config", '{"cudagraph_mode": "FULL"}'], {}, False),
        (["--compilation-config", "not json"], {}, False),
        ([], {"VLLM_USE_V2_MODEL_RUNNER": "0"}, True),
        ([], {"VLLM_USE_V2_MODEL_RUNNER": "00"}, True),
        ([], {"VLLM_USE_V2_MODEL_RUNNER": "1"}, False),
        ([], {"VLLM_USE_V2_MODEL_RUNNER": "false"}, False),  # vLLM refuses it: not avoided
        # the last flag wins, as in vLLM's parser (from the attack on this function)
        (["--enforce-eager", "--no-enforce-eager"], {}, False),
        (["--enforce-eager=false"], {}, False),
        (["-cc", '{"cudagraph_mode": "PIECEWISE"}', "-cc.mode=3"], {}, False),
        (["-cc.mode=3", "-cc", '{"cudagraph_mode": "PIECEWISE"}'], {}, False),
        (
            ["-cc", '{"cudagraph_mode": "PIECEWISE"}', "-cc", '{"cudagraph_mode": "FULL"}'],
            {},
            False,
        ),
        (["-cc", '{"cudagraph_mode": "FULL"}', "-cc", '{"cudagraph_mode": "PIECEWISE"}'], {}, True),
        (["-cc.cudagraph_mode=PIECEWISE", "-cc.cudagraph_mode=FULL"], {}, False),
        (["-cc", '{"cudagraph_mode": "PIECEWISE"}', "-cc", '{"mode": 3}'], {}, False),
        (["-cc", '{"cudagraph_mode": 1}'], {}, True),
        (["-cc.cudagraph_mode=1"], {}, True),
        (["-cc", '{"cudagraph_mode": "FULL_DECODE_ONLY"}'], {}, False),  # not measured
        (["--enforce", "--max-model-len", "2048"], {}, True),  # a prefix, as vLLM takes it
        (["--compilation", '{"cudagraph_mode": "PIECEWISE"}'], {}, True),
        (["-O0"], {}, True),
        (["-O", "1"], {}, True),
        (["--optimization-level", "0"], {}, True),
        (["-O3"], {}, False),
        (["-O0", "-cc", '{"cudagraph_mode": "FULL"}'], {}, False),
    ],
)
def test_the_serve_flags_that_avoid_it(args: list[str], env: dict[str, str], avoided: bool) -> None:
    assert faults.avoided(args, env) is avoided
