"""The GPU proof's reading and reporting (tests/gpu/table.py), in CI: the proof itself needs a GPU
(tests/gpu/proof.py, run by a maintainer on a lent one), but what it parses and prints does not."""

from __future__ import annotations

import json

from tests.gpu import table


def test_the_cause_line_skips_torchs_hints() -> None:
    error = (
        "AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/...\n"
        "CUDA kernel errors might be asynchronously reported at some other API call\n"
    )
    assert table.cause_line(error) == (
        "AcceleratorError: CUDA error: an illegal memory access was encountered"
    )
    assert table.cause_line("\nSearch for x\nRuntimeError: no") == "RuntimeError: no"
    assert (
        table.cause_line("Search for x\nCUDA kernel errors y")
        == "Search for x CUDA kernel errors y"
    )


def test_a_rehearsal_reads_as_ready_with_drafts_or_as_the_engines_own_failure() -> None:
    ready = json.dumps({"exit_code": 0, "outcome": "ready", "ready_s": 128.2, "drafts": 45})
    assert table.rehearsal(0, ready) == "ready in 128.2 s, 45 drafts"
    failed = json.dumps(
        {
            "exit_code": 22,
            "outcome": "failed",
            "engine_said": "torch.AcceleratorError: CUDA error: an illegal memory access was "
            "encountered",
            "died_in": "CUDA graph capture of the drafter",
            "cause": {"key": "illegal-address", "cause": "vLLM's own fault"},
            "failure": {"reason": "the server exited with code 1"},
        }
    )
    assert table.rehearsal(22, failed) == (
        "exit 22 [illegal-address]: torch.AcceleratorError: CUDA error: an illegal memory access "
        "was encountered during CUDA graph capture of the drafter"
    )
    unnamed = json.dumps({"outcome": "failed", "cause": None, "failure": {"reason": "it died"}})
    assert table.rehearsal(22, unnamed) == "exit 22: it died"
    assert table.rehearsal(1, "Traceback ...") == "exit 1: no JSON report"
    assert table.rehearsal(22, '{"cause": "x", "failure": []}') == "exit 22: ?"


def test_a_patchs_state_is_read_from_status_json() -> None:
    status = json.dumps(
        {"patches": [{"name": "eagle3-whitelist", "state": "n/a"},
                     {"name": "eagle3-granite", "state": "pending"}]}
    )  # fmt: skip
    assert table.patch_state(status, "eagle3-granite") == "pending"
    assert table.patch_state(status, "absent") == "unknown"
    assert table.patch_state("not json", "eagle3-granite") == "unknown"
    assert table.patch_state('[{"name": "p", "state": null}]', "p") == "unknown"


def test_the_table_is_dated_and_marks_each_failed_row() -> None:
    rows = [
        {"release": "0.25.0", "patch": "eagle3-granite", "step": "accept (right aux layers)",
         "mode": "graphs", "result": "100.0% of 144", "ok": True, "seconds": 102.6},
        {"release": "0.25.0", "patch": "eagle3-granite", "step": "rehearse 8B shape",
         "mode": "graphs", "result": "exit 22 | x", "ok": False, "seconds": None},
    ]  # fmt: skip
    text = table.render(rows, "2026-12-02", "1 x NVIDIA H100 80GB HBM3")
    lines = text.splitlines()
    assert lines[0] == (
        "GPU proof of 2026-12-02 (`python3 -m tests.gpu.proof`, 1 x NVIDIA H100 80GB HBM3):"
    )
    assert lines[4] == (
        "| 0.25.0 | eagle3-granite | accept (right aux layers) | graphs | 100.0% of 144 | 103 |"
    )
    assert lines[5] == (
        "| 0.25.0 | eagle3-granite | rehearse 8B shape | graphs | FAIL: exit 22 \\| x |  |"
    )


def test_refused_means_the_check_the_patch_lifts_not_any_error() -> None:
    allow_list = (
        "ValidationError: 1 validation error for SpeculativeConfig\n  Value error, eagle3 is only "
        "supported for ['llama', 'qwen'] models. Got ...model_type='granite'"
    )
    assert table.refused(allow_list)
    assert table.refused("RuntimeError: Model does not support EAGLE3 interface")
    assert not table.refused("ModuleNotFoundError: No module named 'pycountry'")
    assert not table.refused("ValueError: No available memory for the cache blocks")
    assert not table.refused("")


def test_verify_reads_as_the_behaviour_checks_that_passed_and_the_first_that_failed() -> None:
    checks = [
        {"tier": "import", "name": "vllm.config.speculative", "ok": True},
        {"tier": "behaviour", "name": "eagle3-mistral: accepts", "ok": True},
        {"tier": "behaviour", "name": "eagle3-glm: capture", "ok": False, "detail": "no aux\nx"},
        {"tier": "behaviour", "name": "eagle3-phi3: skipped one", "ok": True, "skipped": True},
    ]
    assert table.verify_line(json.dumps({"checks": checks})) == (
        "1/2 behaviour checks OK; failed: eagle3-glm: capture: no aux"
    )
    assert table.verify_line(json.dumps({"checks": checks[:2]})) == "1/1 behaviour checks OK"
    assert table.verify_line("Traceback") == "no JSON report"
    assert table.verify_line("[]") == "0/0 behaviour checks OK"
