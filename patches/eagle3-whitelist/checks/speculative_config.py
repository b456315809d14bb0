"""The real SpeculativeConfig (method eagle3) on tiny local config folders.

A server builds exactly this before any proposer exists: a target ``ModelConfig`` from the
checkpoint's config.json, then ``SpeculativeConfig`` with the drafter, which refuses target
families outside the EAGLE-3 allow-list. The folders hold a config.json only (no weights); the
probe runs with the Hugging Face hub offline.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

KIMI_MODULE = "vllm.model_executor.models.kimi_k25"

TEXT_CONFIG = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}

DRAFTER_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 256,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}

KIMI_CONFIG = {
    "model_type": "kimi_k25",
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": TEXT_CONFIG,
    "vision_config": {},
    "media_placeholder_token_id": 163605,
    "torch_dtype": "bfloat16",
}

GPT2_CONFIG = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 256,
    "n_layer": 2,
    "n_head": 4,
    "vocab_size": 1024,
    "n_positions": 1024,
    "torch_dtype": "float16",
}


def _folder(ctx: Any, name: str, cfg: dict[str, Any]) -> str:
    """A checkpoint folder holding only ``config.json``, under the check file's workdir."""
    path = os.path.join(ctx.workdir, name)
    if not os.path.isdir(path):
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as fh:
            json.dump(cfg, fh)
    return path


def _eagle3(ctx: Any, name: str, cfg: dict[str, Any], whole: bool = False) -> tuple[bool, str]:
    """Build the target ModelConfig and the eagle3 SpeculativeConfig: (accepted, why refused).

    ``why`` is the refusal's last line, or all of it (300 characters) with ``whole`` or when it is
    the allow-list's "only supported" refusal.
    """
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    path = _folder(ctx, name, cfg)
    drafter = _folder(ctx, "drafter", DRAFTER_CONFIG)
    try:
        target = ModelConfig(model=path, skip_tokenizer_init=True)
    except Exception as exc:
        raise AssertionError("could not build the target ModelConfig") from exc
    try:
        SpeculativeConfig(
            method="eagle3",
            model=drafter,
            num_speculative_tokens=3,
            target_model_config=target,
            target_parallel_config=ParallelConfig(),
        )
    except Exception as exc:
        text = str(exc).strip()
        why = text.splitlines()[-1] if text else repr(exc)
        if whole or "only supported" in text:
            why = " ".join(text.split())[:300]
        return False, why
    return True, ""


def _accepts(ctx: Any, name: str, cfg: dict[str, Any]) -> None:
    accepted, why = _eagle3(ctx, name, cfg)
    if not accepted:
        raise AssertionError(f"rejected: {why}")


def _kimi_or_skip(ctx: Any) -> None:
    if importlib.util.find_spec(KIMI_MODULE) is None:
        ctx.skip(f"vLLM {ctx.version} has no Kimi-K2.5 model (kimi_k25.py arrived in 0.15.0)")


def check_accepts_deepseek_v3(ctx: Any) -> None:
    """SpeculativeConfig eagle3 accepts deepseek_v3"""
    _accepts(ctx, "deepseek_v3", TEXT_CONFIG)


def check_accepts_kimi_k25(ctx: Any) -> None:
    """SpeculativeConfig eagle3 accepts kimi_k25"""
    _kimi_or_skip(ctx)
    _accepts(ctx, "kimi_k25", KIMI_CONFIG)


def _has_allow_list() -> bool:
    """True where SpeculativeConfig still checks the target's model_type (through 0.21.x)."""
    import inspect

    source = inspect.getsource(importlib.import_module("vllm.config.speculative"))
    return "eagle3_target_supported" in source or "aux_hidden_states_supported" in source


def check_rejects_gpt2(ctx: Any) -> None:
    """SpeculativeConfig eagle3 rejects gpt2 (not on the list)"""
    if not _has_allow_list():
        ctx.skip(
            f"vLLM {ctx.version} has no EAGLE-3 allow-list (gone from 0.22.0): the model "
            "runner's SupportsEagle3 check is the gate there"
        )
    accepted, why = _eagle3(ctx, "gpt2", GPT2_CONFIG, whole=True)
    if accepted:
        raise AssertionError("accepted a family the allow-list should still reject")
    if "only supported" not in why:
        raise AssertionError(f"failed: {why}")
