"""Known failures measured on a GPU (doctor/faults.py): doctor and serve-args warn before the
load, only for the target class and releases they hit, without blaming vLLM for what follows our
own path; the serve flags that avoid one are read as vLLM reads them."""

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


def test_the_finding_names_our_path_the_measurement_and_the_proven_workarounds() -> None:
    (finding,) = faults.findings("granite", "0.25.0")
    assert finding.level == "warning" and finding.check == "known-failure"
    assert "eagle3-granite's GraniteForCausalLM path fails under CUDA graphs" in finding.message
    assert "not shown to be vLLM's" in finding.message
    assert "fault of vLLM" not in finding.message
    assert "one aux hidden state where three are due" in finding.message
    assert "measured on vLLM 0.25.0, granite-3.3-8b shape" in finding.message
    assert finding.fix is not None
    assert finding.fix.startswith("serve with --enforce-eager, or the V1 model runner")
    assert "PIECEWISE graphs start and draft but are not proven" in finding.fix


@pytest.mark.parametrize(
    ("args", "env", "avoided"),
    [
        ([], {}, False),
        (["--enforce-eager"], {}, True),
        (
            ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
            {},
            False,
        ),  # PIECEWISE: not proven (issue 58)
        (
            ['--compilation-config={"cudagraph_mode": "piecewise"}'],
            {},
            False,
        ),  # PIECEWISE: not proven (issue 58)
        (["-cc", '{"cudagraph_mode": "NONE"}'], {}, True),
        (["-cc.cudagraph_mode=PIECEWISE"], {}, False),  # PIECEWISE: not proven (issue 58)
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
        (
            ["-cc", '{"cudagraph_mode": "FULL"}', "-cc", '{"cudagraph_mode": "PIECEWISE"}'],
            {},
            False,
        ),  # PIECEWISE: not proven (issue 58)
        (["-cc.cudagraph_mode=PIECEWISE", "-cc.cudagraph_mode=FULL"], {}, False),
        (["-cc", '{"cudagraph_mode": "PIECEWISE"}', "-cc", '{"mode": 3}'], {}, False),
        (["-cc", '{"cudagraph_mode": 1}'], {}, False),  # PIECEWISE: not proven (issue 58)
        (["-cc.cudagraph_mode=1"], {}, False),  # PIECEWISE: not proven (issue 58)
        (["-cc", '{"cudagraph_mode": "FULL_DECODE_ONLY"}'], {}, False),  # fails (issue 58)
        (["-cc", '{"cudagraph_mode": "NONE"}', "-cc.cudagraph_mode=0"], {}, True),
        (["-cc", '{"cudagraph_mode": "FULL"}', "-cc", '{"cudagraph_mode": "NONE"}'], {}, True),
        (["--enforce", "--max-model-len", "2048"], {}, True),  # a prefix, as vLLM takes it
        (
            ["--compilation", '{"cudagraph_mode": "PIECEWISE"}'],
            {},
            False,
        ),  # PIECEWISE: not proven (issue 58)
        (["-O0"], {}, True),
        (["-O", "1"], {}, False),  # PIECEWISE: not proven (issue 58)
        (["--optimization-level", "0"], {}, True),
        (["-O3"], {}, False),
        (["-O0", "-cc", '{"cudagraph_mode": "FULL"}'], {}, False),
    ],
)
def test_the_serve_flags_that_avoid_it(args: list[str], env: dict[str, str], avoided: bool) -> None:
    assert faults.avoided(args, env) is avoided
