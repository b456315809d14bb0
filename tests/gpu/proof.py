"""The GPU proof of the backports, run by a maintainer on a lent GPU machine (CI has no GPU).

    python3 -m tests.gpu.proof --python /tmp/venv --out DIR      (from the repository root)

For every backport the venv's release needs, under each graph mode (``eager``: --enforce-eager;
``graphs``: vLLM's default, torch.compile and CUDA graph capture; ``piecewise``: graphs with
``cudagraph_mode=PIECEWISE``):

1. ``refused``: before ``apply``, each tiny target (``--families``: Granite, and the families of
   the family codemod: Granite MoE and Mistral from ``tests/e2e/engine_models.py``, Nemotron-H,
   Qwen3-Next, MiMo-V2-Flash and HunYuan MoE from ``tests/e2e/family_models.py``, and the
   families with no upstream EAGLE-3 anywhere from there too: GLM-4.5, GLM-4.7-Flash, Gemma 3,
   Mixtral, Qwen2-MoE and Gemma 2, each through its own layers) with an EAGLE-3 drafter is
   refused;
2. ``apply`` of every built-in the release needs, then ``verify`` (every family's checks on the
   release's real classes); ``accept``: the controlled drafter's acceptance on the tiny models of
   ``tests/e2e/engine_models.py`` (100% with the right aux layers, about 0% shifted by one);
3. ``rehearse``: ``vllm-patcher rehearse`` of the granite-3.3-8b shape with dummy weights
   (``tests/gpu/shapes.py``): ready with drafts, or the cause it names;
4. ``revert``: ``vllm-patcher revert`` leaves the files RECORD-identical (``status``: pending),
   and the tiny pair is refused again.

Prints one table (``tests/gpu/table.py`` renders it; CI tests that part) and writes
``DIR/proof.md`` (the table), ``DIR/proof.json`` (every row) and ``DIR/logs.tar.gz`` (the
logs), also when a step fails or the run is cut short. A rehearsal that dies of a failure known
for the release (``vllm_patcher/doctor/faults.py``: the Granite path under CUDA graphs)
is labelled "known failure" and still FAILs: it follows our path, not a vLLM kernel.

Takes the venv as ``../shared/gpu/device_install.sh`` makes it (``/tmp/venv``). About 8 minutes
on an H200 for the three modes (``make gpu-proof``). The driver runs under ``python3``, which needs
torch, safetensors and tokenizers for the tiny models (the lent H200's image has them).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tests.gpu import shapes, table

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"
PROMPTS = [[3 + 17 * i, 40 + i, 100 + 3 * i] for i in range(4)]
MODES = {
    "eager": {"enforce_eager": True},
    "graphs": {"enforce_eager": False},
    "piecewise": {"enforce_eager": False, "cudagraph_mode": "PIECEWISE"},
}
KV_BYTES = 1 << 30  # each tiny engine's KV cache, fixed: engines started together do not profile
# each other's memory as theirs (0.21.0, six at once with a share of the GPU: "No available memory")
SERVE_MODE = {
    "eager": ["--enforce-eager"],
    "graphs": [],
    "piecewise": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
}
ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# --families: each tiny target of tests/e2e/engine_models.py and the patch it proves
FAMILIES = {
    "granite": ("eagle3-granite", "target"),
    "granitemoe": ("eagle3-granitemoe", "granitemoe-target"),
    "mistral": ("eagle3-mistral", "mistral-target"),
    # tests/e2e/family_models.py: the same stream through each family's own layers
    "nemotron_h": ("eagle3-nemotron-h", "nemotron_h-target"),
    "qwen3_next": ("eagle3-qwen3-next", "qwen3_next-target"),
    "mimo_v2_flash": ("eagle3-mimo-v2-flash", "mimo_v2_flash-target"),
    "hunyuan_moe": ("eagle3-hunyuan", "hunyuan_moe-target"),
    # families with no upstream EAGLE-3 in any release
    "glm4_moe": ("eagle3-glm4-moe", "glm4_moe-target"),
    "glm4_moe_lite": ("eagle3-glm4-moe-lite", "glm4_moe_lite-target"),
    "gemma3": ("eagle3-gemma3", "gemma3-target"),
    "mixtral": ("eagle3-mixtral", "mixtral-target"),
    "qwen2_moe": ("eagle3-qwen2-moe", "qwen2_moe-target"),
    "gemma2": ("eagle3-gemma2", "gemma2-target"),
    "granitemoehybrid": ("eagle3-granitemoehybrid", "granitemoehybrid-target"),
}
# a hybrid target's drafter: a KV page per token that divides the target's attention page (one
# KV head): with the usual drafter's two, both engines failed at the KV cache's setup on 0.21.0
# (an AssertionError in unify_kv_cache_spec_page_size, 2026-12-03), which doctor now names
DRAFTER_SUFFIX = {"nemotron_h": "-kv1", "qwen3_next": "-kv1", "granitemoehybrid": "-kv1"}


# Kernels that need no FlashInfer JIT build: on the lent H200 (no nvcc cache, no network) the
# FlashInfer CUTLASS MoE and GDN prefill kernels were built by ninja during the first forward after
# torch.compile, and every MoE or Qwen3-Next engine stalled there for minutes (the stacks of
# 2026-12-03: flashinfer/jit/core.py build_and_load). Triton's kernels serve the tiny models.
NO_JIT = {"moe_backend": "triton", "gdn_prefill_backend": "triton"}
NO_JIT_FROM = "0.21.0"  # the release the proof ran these engine arguments on


def engine(
    py: str, logs: Path, name: str, target: Path, drafter: Path, mode: str, timeout: float = 400,
    kernels: dict | None = None,
) -> dict:  # fmt: skip
    args = {
        "target": str(target),
        "drafter": str(drafter),
        "k": 3,
        "prompts": PROMPTS,
        "max_tokens": 48,
        "gpu_memory_utilization": 0.12,
        "max_model_len": 512,
        "enforce_eager": MODES[mode]["enforce_eager"],
        "engine": {"kv_cache_memory_bytes": KV_BYTES, **(kernels or {})},
    }
    if "cudagraph_mode" in MODES[mode]:  # LLM's own keyword, as engine_run passes "engine"
        args["engine"]["compilation_config"] = {"cudagraph_mode": MODES[mode]["cudagraph_mode"]}
    started = time.monotonic()
    log = logs / f"{name}.log"
    # each engine its own compile caches: engines compiling the same drafter side by side in one
    # cache all stalled after their target's compile (0.21.0, eight at once, 2026-12-03)
    caches = logs.parent / "caches" / name
    own = {"VLLM_CACHE_ROOT": str(caches / "vllm"), "TRITON_CACHE_DIR": str(caches / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor")}  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(
            [py, str(E2E / "engine_run.py"), json.dumps(args)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV, **own, "PYTHONFAULTHANDLER": "1"},
        )
        try:
            code = f"exit {proc.wait(timeout=timeout)}"
        except subprocess.TimeoutExpired:  # one stalled engine costs its own row, not the run
            proc.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the log
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            code = f"still running after {timeout:.0f} s, stopped (its stacks: the log)"
    answers = [x for x in log.read_text().splitlines() if x.startswith("{")]
    answer = json.loads(answers[-1]) if answers else {"error": f"no answer ({code})"}
    answer["seconds"] = round(time.monotonic() - started, 1)
    return answer


def refusals(py: str, logs: Path, tiny: Path, families: list[str], when: str) -> dict[str, dict]:
    """Each family's tiny target with the right drafter, eager, side by side: the answers."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(families))) as pool:
        futures = {
            fam: pool.submit(
                engine,
                py,
                logs,
                f"refused-{when}-{fam}",
                tiny / FAMILIES[fam][1],
                tiny / "right",
                "eager",
            )  # fmt: skip
            for fam in families
        }
    return {fam: fut.result() for fam, fut in futures.items()}


def acceptance(answer: dict) -> str:
    if "error" in answer:
        return "error: " + table.cause_line(answer["error"])
    c = answer["counters"]
    drafted = float(c.get("spec_decode_num_draft_tokens") or 0)
    if not drafted:
        return "no drafts"
    return f"{100 * float(c['spec_decode_num_accepted_tokens']) / drafted:.1f}% of {int(drafted)}"


def _device() -> str:
    """The GPU this ran on, as nvidia-smi names it (the lent machines are H100 or H200)."""
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.split("\n")  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "a GPU nvidia-smi did not name"
    named = [n.strip() for n in names if n.strip()]
    return f"{len(named)} x {named[0]}" if named else "a GPU nvidia-smi did not name"


def tool(venv: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "vllm-patcher"), "--python", str(venv), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=timeout,
    )


def rehearse_row(venv: Path, logs: Path, big: dict[str, Path], mode: str, release: str) -> tuple:
    """``vllm-patcher rehearse`` of the 8B shape: (result, ok, seconds). A failure known for this
    release (``doctor.faults``, which doctor warns of) is labelled so, and is still a failure:
    it follows our Granite path."""
    from vllm_patcher.doctor import faults

    spec = json.dumps(
        {"method": "eagle3", "model": str(big["drafter-8b"]), "num_speculative_tokens": 3}
    )
    started = time.monotonic()
    log = logs / f"rehearse-{mode}.log"
    r = tool(venv, "--json", "rehearse", "--log", str(log), "--ready-timeout", "400", "--",
             str(big["granite-8b"]), "--max-model-len", "2048", "--speculative-config", spec,
             *SERVE_MODE[mode], timeout=480)  # fmt: skip
    (logs / f"rehearse-{mode}.json").write_text(r.stdout + r.stderr)
    result, ok = table.rehearsal(r.returncode, r.stdout), r.returncode == 0
    if not ok and "[illegal-address]" in result and faults.known("GraniteForCausalLM", release):
        result = f"known failure ({faults.GRANITE_DRAFTER_GRAPHS.key}): {result}"
    return result, ok, round(time.monotonic() - started, 1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, type=Path, help="the venv: vLLM and vllm-patcher")
    ap.add_argument("--out", required=True, type=Path, help="proof.json, proof.md, logs.tar.gz")
    ap.add_argument("--modes", default="eager,graphs,piecewise", help="for the tiny models")
    ap.add_argument("--rehearse-modes", default="eager,graphs,piecewise",
                    help="for the 8B shape ('' for none)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=6, help="tiny engines run at once")
    ap.add_argument("--families", default="granite", help=f"tiny targets ({', '.join(FAMILIES)})")
    ap.add_argument("--engine-timeout", type=float, default=400, help="seconds for one tiny engine")
    ap.add_argument("--accept-only", action="store_true",
                    help="apply, the acceptance rows, revert: no refusals, verify or rehearsal")  # fmt: skip
    a = ap.parse_args()
    # a `timeout` around the run (the device's call limit) still gets the rows and logs written
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    venv, out = a.python, a.out
    py = str(venv / "bin" / "python")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-proof-"))
    logs = work / "logs"
    logs.mkdir()
    built = subprocess.run([sys.executable, str(E2E / "engine_models.py"), str(work / "tiny")],
                           capture_output=True, text=True)  # fmt: skip
    if built.returncode != 0:  # python3 without torch, safetensors or tokenizers, say
        shutil.rmtree(work)
        sys.exit(
            f"gpu-proof: {sys.executable} could not build the tiny models "
            f"(tests/e2e/engine_models.py): {(built.stderr.strip() or '?').splitlines()[-1]}"
        )
    big = shapes.build(work / "big")
    tiny = work / "tiny"
    families = [f for f in a.families.split(",") if f]
    # the families with layers of their own (hybrid, MoE): family_models.py builds those it knows
    subprocess.run([sys.executable, str(E2E / "family_models.py"), str(tiny), *families],
                   check=True, capture_output=True)  # fmt: skip
    version = subprocess.run([py, "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True)  # fmt: skip
    release = version.stdout.strip()
    if version.returncode != 0 or not release:
        shutil.rmtree(work)
        sys.exit(
            f"gpu-proof: {py} cannot import vllm: give --python a venv with vLLM and vllm-patcher"
        )
    rows: list[dict] = []
    patch_of = {f: FAMILIES[f][0] for f in families}
    from packaging.version import Version

    from vllm_patcher.releases import release_of

    kernels = NO_JIT if release_of(release) >= Version(NO_JIT_FROM) else {}

    def row(step: str, mode: str, result: str, ok: bool, seconds: float | None = None,
            patch: str = "eagle3-granite") -> None:  # fmt: skip
        rows.append({"release": release, "patch": patch, "step": step, "mode": mode,
                     "result": result, "ok": ok, "seconds": seconds})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)

    try:
        for fam, before in (
            {} if a.accept_only else refusals(py, logs, tiny, families, "before")
        ).items():
            row("refused before apply", "any", table.cause_line(before.get("error", "served")),
                table.refused(before.get("error", "")), before["seconds"], patch_of[fam])  # fmt: skip
        applied = tool(venv, "apply")  # every built-in the release needs
        (logs / "apply.log").write_text(applied.stdout + applied.stderr)
        said = (applied.stdout.strip() or applied.stderr.strip() or "-").splitlines()[-1]
        row("apply", "-", said.strip(), applied.returncode == 0, patch="all")
        if not a.accept_only:
            verified = tool(venv, "--json", "verify")
            (logs / "verify.json").write_text(verified.stdout + verified.stderr)
            row("verify (every family's checks)", "-", table.verify_line(verified.stdout),
                verified.returncode == 0, patch="all")  # fmt: skip
        jobs = [(f, m, d) for f in families for m in a.modes.split(",") if m
                for d in ("right", "shifted")]  # fmt: skip
        with concurrent.futures.ThreadPoolExecutor(max(1, min(a.jobs, len(jobs)))) as pool:
            futures = {
                job: pool.submit(
                    engine,
                    py,
                    logs,
                    f"accept-{job[0]}-{job[1]}-{job[2]}",
                    tiny / FAMILIES[job[0]][1],
                    tiny / (job[2] + DRAFTER_SUFFIX.get(job[0], "")),
                    job[1],
                    a.engine_timeout,
                    kernels,
                )  # fmt: skip
                for job in jobs
            }
            # each row as its engine ends: a run cut short (SIGTERM) keeps the rows it has
            job_of = {fut: job for job, fut in futures.items()}
            for fut in concurrent.futures.as_completed(job_of):
                (fam, mode, drafter), ans = job_of[fut], fut.result()
                text = acceptance(ans)
                share = float(text.split("%")[0]) if "%" in text and "error" not in text else None
                ok = share is not None and (share == 100.0 if drafter == "right" else share < 5)
                row(f"accept ({drafter} aux layers)", mode, text, ok, ans["seconds"],
                    patch_of[fam])  # fmt: skip
        for mode in filter(None, a.rehearse_modes.split(",")):
            row("rehearse 8B shape", mode, *rehearse_row(venv, logs, big, mode, release))
        reverted = tool(venv, "revert")
        status = tool(venv, "--json", "status")
        (logs / "revert.log").write_text(reverted.stdout + reverted.stderr + status.stdout)
        for fam in families:
            state = table.patch_state(status.stdout, patch_of[fam])
            row("revert (RECORD-identical)", "-", f"exit {reverted.returncode}, status {state}",
                reverted.returncode == 0 and state == "pending", patch=patch_of[fam])  # fmt: skip
        for fam, after in (
            {} if a.accept_only else refusals(py, logs, tiny, families, "after")
        ).items():
            row("refused after revert", "any", table.cause_line(after.get("error", "served")),
                table.refused(after.get("error", "")), after["seconds"], patch_of[fam])  # fmt: skip
    finally:  # whatever ran, its rows and logs come back (3 files: the device returns 8 at most)
        (out / "proof.json").write_text(json.dumps(rows, indent=1))
        with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
            tar.add(logs, arcname="logs")
        text = table.render(rows, time.strftime("%Y-%m-%d"), _device())
        (out / "proof.md").write_text(text)
        print(text)
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
