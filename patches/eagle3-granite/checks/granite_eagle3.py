"""Behaviour checks for eagle3-granite: EAGLE-3 with a Granite (GraniteForCausalLM) target.

Run by the probe in the target's interpreter. The first two are the check library's "a family
implements EAGLE-3" (``vllm_patcher_checklib.eagle3``) with Granite's names: the interface and
its default aux layers for Granite 3.x 8B's 40 layers, then ``GraniteModel.forward`` capturing the
residual stream entering layers 0, 3 and 5 (a Granite decoder layer adds its own residual, so
that stream is the hidden state passed into the layer). The third: where the release still has
the EAGLE-3 allow-list (through 0.21.x), the real ``SpeculativeConfig`` accepts a tiny
``granite`` target and still rejects ``granitemoehybrid``, which the list's substring match would
admit if ``"granite"`` were an entry but whose model has no EAGLE-3 support upstream
(``granitemoe`` has its own backport, eagle3-granitemoe). Where eagle3-granitemoehybrid is applied
its own exact entry admits that type, so the control is the family check's ``granite_unlisted``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3

MODULE = "vllm.model_executor.models.granite"
# Granite 3.x 8B has 40 layers: vLLM's default aux layers are then (2, 20, 37). A Granite decoder
# layer adds its own residual; GraniteModel.forward scales the embedding.
GRANITE = eagle3.Family(
    "Granite",
    "GraniteForCausalLM",
    "GraniteModel",
    num_layers=40,
    wanted=(3, 21, 38),
    style="plain",
    config={"embedding_multiplier": 3.0},
)


def _granite() -> Any:
    try:
        return importlib.import_module(MODULE)
    except Exception as exc:
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc


def check_supports_eagle3(ctx: Any) -> None:
    """GraniteForCausalLM implements SupportsEagle3 with working default and setter."""
    eagle3.implements_supports_eagle3(_granite(), GRANITE)


def check_forward_returns_aux_states(ctx: Any) -> None:
    """The real GraniteModel.forward captures the residual stream entering requested layers."""
    eagle3.forward_captures_aux(_granite(), GRANITE)


def _target_config(model_type: str, architecture: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22,
        "attention_multiplier": 0.015625,
        "logits_scaling": 8.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    if model_type == "granitemoehybrid":
        config.update(
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["attention"] * config["num_hidden_layers"],
        )
    return config


def check_speculative_config_accepts_granite(ctx: Any) -> None:
    """The real SpeculativeConfig accepts EAGLE-3 for a granite target (and still rejects granitemoehybrid)."""
    eagle3.skip_without_allow_list(ctx)
    drafter = checkpoints.folder(ctx, "eagle3_drafter", checkpoints.DRAFTER_CONFIG)

    def target(model_type: str, architecture: str) -> Any:
        path = checkpoints.folder(
            ctx, f"{model_type}_target", _target_config(model_type, architecture)
        )
        config = eagle3.model_config(path, f"a tiny {model_type} target")
        got = config.hf_text_config.model_type
        if got != model_type:
            raise RuntimeError(
                f"the tiny {model_type} target loaded with model_type {got!r}; "
                "the check cannot judge the allow-list"
            )
        return config

    eagle3.accepts(
        target("granite", "GraniteForCausalLM"),
        drafter,
        "granite",
        "the allow-list check in vllm/config/speculative.py does not admit 'granite'",
    )
    source = inspect.getsource(importlib.import_module("vllm.config.speculative"))
    if '"granitemoehybrid"' in source:
        return  # its own backport's exact entry; the family check judges exactness
    eagle3.refuses(
        target("granitemoehybrid", "GraniteMoeHybridForCausalLM"),
        drafter,
        "granitemoehybrid",
        ", whose model has no EAGLE-3 support: the allow-list admits every model_type "
        "containing 'granite' instead of granite exactly",
    )
