"""Known failures measured on a GPU (doctor/faults.py): doctor and serve-args warn before the
load, only for the target class and releases they hit, without blaming vLLM for what follows our
own path; the serve flags that avoid one are read as vLLM reads them."""

from __future__ import annotations

import pytest

from vllm_patcher.doctor import faults

GRANITE = faults.GRANITE_DRAFTER_GRAPHS


@pytest.mark.parametrize("version", ["0.21.0", "0.22.0", "0.25.0", "0.31.0", "0.32.0"])
def test_the_granite_graph_failure_is_fixed_so_no_release_is_warned(version: str) -> None:
    """The Granite graph crash followed the backport's capture (the tensor the next layer is given),
    fixed in the patch; a venv patched the old way is outdated (doctor's venv check), not a
    release-wide warning."""
    assert faults.FAULTS == ()
    assert faults.known("GraniteForCausalLM", version) == []
    assert faults.findings("granite", version) == []
    assert "fault of vLLM" not in GRANITE.what and "before 2026-12-06" in GRANITE.what


def test_a_known_failures_finding_names_the_patch_path_and_the_measured_fix() -> None:
    finding = GRANITE.finding("0.25.0")
    assert finding.level == "warning" and finding.check == "known-failure"
    assert finding.message.startswith(
        "on vLLM 0.25.0, eagle3-granite's GraniteForCausalLM path fails with vLLM's defaults"
    )
    assert finding.fix == f"serve with {GRANITE.workaround}"


@pytest.mark.parametrize(
    ("args", "env", "avoided"),
    [
        ([], {}, False),
        (["--enforce-eager"], {}, True),
        (
            ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (
            ['--compilation-config={"cudagraph_mode": "piecewise"}'],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (["-cc", '{"cudagraph_mode": "NONE"}'], {}, True),
        (
            ["-cc.cudagraph_mode=PIECEWISE"],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
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
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (["-cc.cudagraph_mode=PIECEWISE", "-cc.cudagraph_mode=FULL"], {}, False),
        (["-cc", '{"cudagraph_mode": "PIECEWISE"}', "-cc", '{"mode": 3}'], {}, False),
        (
            ["-cc", '{"cudagraph_mode": 1}'],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (
            ["-cc.cudagraph_mode=1"],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (["-cc", '{"cudagraph_mode": "FULL_DECODE_ONLY"}'], {}, False),  # fails
        (["-cc", '{"cudagraph_mode": "NONE"}', "-cc.cudagraph_mode=0"], {}, True),
        (["-cc", '{"cudagraph_mode": "FULL"}', "-cc", '{"cudagraph_mode": "NONE"}'], {}, True),
        (["--enforce", "--max-model-len", "2048"], {}, True),  # a prefix, as vLLM takes it
        (
            ["--compilation", '{"cudagraph_mode": "PIECEWISE"}'],
            {},
            False,
        ),  # PIECEWISE: not proven to feed the drafter the right states
        (["-O0"], {}, True),
        (["-O", "1"], {}, False),  # PIECEWISE: not proven to feed the drafter the right states
        (["--optimization-level", "0"], {}, True),
        (["-O3"], {}, False),
        (["-O0", "-cc", '{"cudagraph_mode": "FULL"}'], {}, False),
    ],
)
def test_the_serve_flags_that_avoid_it(args: list[str], env: dict[str, str], avoided: bool) -> None:
    assert faults.avoided(args, env) is avoided
