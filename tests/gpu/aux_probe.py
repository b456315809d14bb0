"""What reaches the EAGLE-3 drafter, engine by engine: the probe behind docs/gpu-proof.md's Granite
root cause (run by a maintainer on a lent GPU machine; CI has no GPU).

    python3 -m tests.gpu.aux_probe --python /tmp/venv --out DIR [--cases a,b,...]   (repo root)

Each case is one in-process ``LLM`` (``tests/e2e/engine_run.py``'s engine, dummy weights) of a
real-size shape from ``tests/gpu/shapes.py`` cut to 8 layers (hidden 4096; the drafter's aux layers
2, 4, 5) under one graph mode, with two observers installed before vLLM builds anything:

- the target's ``forward`` (``GraniteForCausalLM`` / ``LlamaForCausalLM``): how many aux hidden
  states it returned, their shapes, and whether any of them shares storage with another or with
  the final hidden states;
- the drafter's ``combine_hidden_states``: the width of what the runner concatenated for it
  (3 x 4096 = 12288 when all three states arrived).

A case may also swap the Granite model's capture (``capture``: ``fresh`` records a new tensor,
``h + 0``, where the patch records the layer's output itself). The ``wide-*`` cases are the
controlled pair at hidden 4096 (``tests/gpu/wide.py``) of Granite, its Llama control and every
family the GPU proof covers, with real weights: their acceptance says whether the drafter got the
right states. Each case writes one JSON line (with the model runner its log names, V1 or V2); the
driver keeps every log in ``DIR/logs.tar.gz``. The family cases pass the MoE and GDN kernel
arguments of ``tests/gpu/proof.py``'s ``NO_JIT``, which vLLM has from 0.21.0.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tests.gpu import shapes
from tests.gpu.proof import DRAFTER_SUFFIX, NO_JIT

ROOT = Path(__file__).resolve().parents[2]
MARK = "aux_probe: "
LAYERS, AUX = 8, (2, 4, 5)
MODES = {
    "eager": {"enforce_eager": True},
    "piecewise": {
        "enforce_eager": False,
        "engine": {"compilation_config": {"cudagraph_mode": "PIECEWISE"}},
    },
    "full_decode": {
        "enforce_eager": False,
        "engine": {"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
    },
    "default": {"enforce_eager": False},
}
# the families besides Granite (and Llama, the control) widened by tests/gpu/wide.py
WIDE_FAMILIES = (
    "granitemoe",
    "mistral",
    "qwen3_next",
    "nemotron_h",
    "mimo_v2_flash",
    "hunyuan_moe",
    # no upstream EAGLE-3 in any release (tests/e2e/family_models.py, family_models_moe.py)
    "glm4_moe",
    "glm4_moe_lite",
    "gemma3",
    "mixtral",
    "qwen2_moe",
    "gemma2",
    "granitemoehybrid",
)
# each family's drafter suffix: tests/gpu/proof.py's, and Granite 4 (a Mamba-2 hybrid, one KV
# head of 64 in its attention) the drafter of one KV head like the other hybrids'
SUFFIX = DRAFTER_SUFFIX
# name: (target, drafter, mode, capture); "patch": the capture the applied patch makes. The
# dummy-weight shapes (8 layers of granite-3.3-8b's, or all 40) say whether the engine starts
# and what reaches the drafter; the "wide" pair (tests/gpu/wide.py: engine_models.py's controlled
# target and drafters at hidden 4096, real weights) says whether it speculates right.
CASES = {
    "granite-full_decode": ("granite", "drafter", "full_decode", "patch"),
    "llama-full_decode": ("llama", "drafter", "full_decode", "patch"),
    "granite-eager": ("granite", "drafter", "eager", "patch"),
    "granite-fresh-full_decode": ("granite", "drafter", "full_decode", "fresh"),
    "granite-default": ("granite", "drafter", "default", "patch"),
    "granite-fresh-default": ("granite", "drafter", "default", "fresh"),
    "granite-alias-default": ("granite", "drafter", "default", "alias"),
    "granite-clone-default": ("granite", "drafter", "default", "clone"),
    "granite40-default": ("granite40", "drafter40", "default", "patch"),
    **{
        f"wide-{t}-{d}-{m}": (f"wide-{t}", f"wide-{d}", m, "patch")
        for t in ("granite", "llama")
        for d in ("right", "shifted")
        for m in MODES
    },
    # every other family proven at hidden 128, widened the same way (a hybrid: its drafter of one
    # KV head, SUFFIX)
    **{
        f"wide-{f}-{d}-{m}": (f"wide-{f}", f"wide-{d}{SUFFIX.get(f, '')}", m, "patch")
        for f in WIDE_FAMILIES
        for d in ("right", "shifted")
        for m in MODES
    },
}
# what `make gpu-proof` runs (the venv with every built-in its release needs applied): the fix at 8
# and 40 layers beside the capture it replaced, the wide Granite pair and its Llama control in
# every graph mode, and every other family's wide pair under the two modes with FULL graphs
FIXED = ",".join(
    [
        "granite40-default",
        "granite-default",
        "granite-alias-default",
        *(
            f"wide-{t}-{d}-{m}"
            for t in ("granite", "llama")
            for d in ("right", "shifted")
            for m in MODES
        ),
        *(
            f"wide-{f}-{d}-{m}"
            for f in WIDE_FAMILIES
            for d in ("right", "shifted")
            for m in ("full_decode", "default")
        ),
    ]
)


def _models(root: Path, needed: set[str]) -> dict[str, Path]:
    """The models the chosen cases name, built on the driver's side."""
    cut = {"num_hidden_layers": LAYERS}
    aux = {"eagle_aux_hidden_state_layer_ids": list(AUX)}
    made = {
        "granite": lambda p: shapes.write(p, {**shapes.GRANITE, **cut}),
        "llama": lambda p: shapes.write(p, {**shapes.LLAMA, **cut}),
        "drafter": lambda p: shapes.write(p, {**shapes.DRAFTER, **aux}),
        "granite40": lambda p: shapes.write(p, shapes.GRANITE),
        "drafter40": lambda p: shapes.write(p, shapes.DRAFTER),
    }
    return {name: made.get(name, _wide)(root / name) for name in sorted(needed)}


def _wide(dst: Path) -> Path:
    """engine_models.py's controlled pair and family_models.py's targets, widened to hidden 4096
    (tests/gpu/wide.py): ``dst`` is ``wide-<target or drafter>``."""
    from tests.e2e import engine_models as em
    from tests.e2e import family_models as fm
    from tests.gpu import wide

    key = dst.name.removeprefix("wide-")
    if key in fm.BUILDERS:
        return wide.widen_built(fm.BUILDERS[key], dst, 4096)
    tiny = dst.with_name(dst.name + "-tiny")
    if key.startswith(("right", "shifted")):
        layers = em.SHIFTED_LAYERS if key.startswith("shifted") else em.RIGHT_LAYERS
        em.drafter(tiny, 1.0, layers=layers, kv_heads=1 if key.endswith("-kv1") else em.HEADS)
    else:
        em.target(tiny, family=key)
    return wide.widen(tiny, dst, 4096)


# ---- inside the venv's interpreter ---------------------------------------------------------------


def _say(**facts: object) -> None:
    print(MARK + json.dumps(facts), file=sys.stderr, flush=True)


def _observe(capture: str) -> None:
    import torch
    from vllm.model_executor.models import granite, llama, llama_eagle3

    seen = {"target": 0, "drafter": 0}

    def describe(name: str, out: object) -> None:
        seen["target"] += 1
        if seen["target"] > 4 and not isinstance(out, tuple):
            return
        if not isinstance(out, tuple):
            _say(where="target", cls=name, returned=type(out).__name__)
            return
        hidden, aux = out
        ptrs = [t.untyped_storage().data_ptr() for t in aux]
        if seen["target"] <= 4 or len(aux) != len(AUX):
            _say(
                where="target",
                cls=name,
                aux=len(aux),
                shapes=[list(t.shape) for t in aux],
                shared=len(set(ptrs)) < len(ptrs) or hidden.untyped_storage().data_ptr() in ptrs,
            )

    for cls in (granite.GraniteForCausalLM, llama.LlamaForCausalLM):
        original = cls.forward

        def forward(self, *args, _original=original, _name=cls.__name__, **kwargs):
            out = _original(self, *args, **kwargs)
            describe(_name, out)
            return out

        cls.forward = forward

    combine = llama_eagle3.Eagle3LlamaForCausalLM.combine_hidden_states

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        seen["drafter"] += 1
        if seen["drafter"] <= 4 or hidden_states.shape[-1] != 4096 * len(AUX):
            _say(where="drafter", width=hidden_states.shape[-1], rows=hidden_states.shape[0])
        return combine(self, hidden_states)

    llama_eagle3.Eagle3LlamaForCausalLM.combine_hidden_states = combine_hidden_states

    made = {  # the capture of the layer's output, as each variant makes it
        "fresh": lambda h: h + 0,
        "alias": lambda h: h,  # the patch before the fix: the tensor the next layer takes
        "clone": lambda h: h.clone(),  # Inductor removes aten.clone as a no-op
    }
    if capture in made:

        def add(self, aux_hidden_states, layer_idx, hidden_states, residual):
            if layer_idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(made[capture](hidden_states))
            return aux_hidden_states

        granite.GraniteModel._maybe_add_hidden_state = add


def worker(case: dict) -> int:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    _observe(case["capture"])
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    import engine_run  # noqa: E402  (the same engine the proof runs)

    started = time.monotonic()
    answer, ran = engine_run.run(case["args"], case["args"]["drafter"])
    answer["s"] = round(time.monotonic() - started)
    print(json.dumps(answer), flush=True)
    return 0 if ran else 3


# ---- the driver (the image's python3) ------------------------------------------------------------


def _case_args(models: dict[str, Path], target: str, drafter: str, mode: str) -> dict:
    spec = MODES[mode]
    real = target.startswith("wide-")  # the controlled pair: its own weights, 48 tokens each
    return {
        "target": str(models[target]),
        "drafter": str(models[drafter]),
        "k": 3,
        "prompts": [[3 + 17 * i, 40 + i, 100 + 3 * i] for i in range(4)],
        "max_tokens": 48 if real else 32,
        "load_format": "auto" if real else "dummy",
        "max_model_len": 512 if real else 2048,
        # a large KV cache where graphs are captured: the fault's capture count moved with its size
        "gpu_memory_utilization": 0.3 if target.endswith("40") else 0.05 if real else 0.12,
        "enforce_eager": spec["enforce_eager"],
        "engine": {
            "kv_cache_memory_bytes": (1 if real else 4 if mode == "default" else 2) << 30,
            # MoE and GDN kernels that need no FlashInfer build at run time (tests/gpu/proof.py)
            **(NO_JIT if target.removeprefix("wide-") in WIDE_FAMILIES else {}),
            **spec.get("engine", {}),
        },
    }


def _run_case(python: str, name: str, case: dict, logs: Path, timeout: int) -> dict:
    log = logs / f"{name}.log"
    env = {**os.environ, "VLLM_CACHE_ROOT": str(logs / f"cache-{name}"), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    try:
        with log.open("w") as err:
            proc = subprocess.run(
                [python, "-m", "tests.gpu.aux_probe", "--worker", json.dumps(case)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=timeout,
            )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        answer = json.loads(lines[-1]) if lines else {"error": f"exit {proc.returncode}, no answer"}
    except subprocess.TimeoutExpired:
        answer = {"error": f"no answer in {timeout} s"}
    text = log.read_text(errors="replace")
    seen = [json.loads(ln[len(MARK) :]) for ln in text.splitlines() if ln.startswith(MARK)]
    # the model runner, by how it names the graphs it captures: V2 "CUDA graphs (FULL)" and
    # "prefill CUDA graphs (...)", V1 "CUDA graphs (decode, FULL)" and "(mixed prefill-decode, ...)"
    v2 = re.search(r"Capturing (prefill |decode )?CUDA graphs \((FULL|PIECEWISE)\)", text)
    v1 = re.search(r"Capturing CUDA graphs \((decode|mixed prefill-decode), ", text)
    runner = "V2" if v2 else "V1" if v1 else None  # eager: no graphs, no name
    return {
        "case": name,
        "s": round(time.monotonic() - started),
        "runner": runner,
        "answer": answer,
        "seen": seen,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker")
    p.add_argument("--python", default="/tmp/venv/bin/python")
    p.add_argument("--out", default="/tmp/aux-probe")
    p.add_argument("--cases", default=FIXED)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--timeout", type=int, default=400)
    a = p.parse_args(argv)
    if a.worker:
        return worker(json.loads(a.worker))
    python = a.python if a.python.endswith("python") else str(Path(a.python) / "bin" / "python")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="aux-probe-"))
    chosen = [CASES[name] for name in a.cases.split(",")]
    models = _models(
        logs / "models", {m for target, drafter, _, _ in chosen for m in (target, drafter)}
    )
    rows = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = []
        for name in a.cases.split(","):
            target, drafter, mode, capture = CASES[name]
            case = {"capture": capture, "args": _case_args(models, target, drafter, mode)}
            futures.append(pool.submit(_run_case, python, name, case, logs, a.timeout))
        for f in futures:
            row = f.result()
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "probe.json").write_text(json.dumps(rows, indent=1))
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for log in logs.glob("*.log"):
            tar.add(log, arcname=log.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
