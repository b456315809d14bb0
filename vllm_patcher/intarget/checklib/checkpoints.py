"""Tiny config-only checkpoints for the checks: a ``config.json``, no weights.

The real ``ModelConfig`` and ``SpeculativeConfig`` of the release under test read them as a server
reads a checkpoint folder; the probe runs with the Hugging Face hub offline.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

# A Llama EAGLE-3 drafter.
DRAFTER_CONFIG: dict[str, Any] = {
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

# A DeepSeek-V3 text model (the language model of Kimi-K2.5 too).
DEEPSEEK_V3_CONFIG: dict[str, Any] = {
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

KIMI_K25_CONFIG: dict[str, Any] = {
    "model_type": "kimi_k25",
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": DEEPSEEK_V3_CONFIG,
    "vision_config": {},
    "media_placeholder_token_id": 163605,
    "torch_dtype": "bfloat16",
}

# A family no EAGLE-3 allow-list ever held: the control a check expects refused.
GPT2_CONFIG: dict[str, Any] = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 256,
    "n_layer": 2,
    "n_head": 4,
    "vocab_size": 1024,
    "n_positions": 1024,
    "torch_dtype": "float16",
}


def folder(ctx: Any, name: str, config: dict[str, Any], extra: dict[str, str] | None = None) -> str:
    """The checkpoint folder ``name`` under ``ctx.workdir``: ``config.json`` and the ``extra``
    files (name -> text), written once; a second call with the same name reuses it."""
    path = os.path.join(ctx.workdir, name)
    if not os.path.isdir(path):
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as fh:
            json.dump(config, fh)
        for filename, text in (extra or {}).items():
            with open(os.path.join(path, filename), "w") as fh:
                fh.write(text)
    return path


@contextlib.contextmanager
def private_remote_code_cache(root: str) -> Iterator[None]:
    """trust_remote_code's copy of a checkpoint's config module under ``root``, not in ~/.cache;
    the modules cache path, ``sys.path`` and the ``transformers_modules`` entries it adds are all
    put back afterwards (MiniMax-M2's check and the family checks use it)."""
    try:
        dmu: Any = importlib.import_module("transformers.dynamic_module_utils")
    except ImportError:
        dmu = None
    if dmu is None or not hasattr(dmu, "HF_MODULES_CACHE"):
        yield
        return
    saved_cache, saved_path, saved_modules = dmu.HF_MODULES_CACHE, list(sys.path), set(sys.modules)
    dmu.HF_MODULES_CACHE = os.path.join(root, "hf_modules")
    try:
        yield
    finally:
        dmu.HF_MODULES_CACHE = saved_cache
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name == "transformers_modules" or name.startswith("transformers_modules."):
                del sys.modules[name]
