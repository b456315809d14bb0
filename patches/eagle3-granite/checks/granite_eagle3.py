"""Behaviour checks for eagle3-granite: EAGLE-3 with a Granite (GraniteForCausalLM) target.

Loaded inside the target environment's interpreter (vLLM and torch importable). Each ``check_*``
function gets ``ctx`` (``ctx.version``, ``ctx.workdir``, ``ctx.skip(reason)``), passes by
returning and fails by raising with a plain-words message. Only the standard library, torch and
vLLM are used; every stand-in installed here is taken back out in a ``finally``.

What the patch must achieve, and what these checks drive with the installed vLLM's own code:

1. ``GraniteForCausalLM`` implements ``SupportsEagle3`` (the model runner refuses EAGLE-3
   otherwise), its default aux layers are ``(2, n // 2, n - 3)`` for ``n`` decoder layers, and
   ``set_aux_hidden_state_layers`` reaches the inner ``GraniteModel``. vLLM up to 0.17.x asks
   the model for ``get_eagle3_aux_hidden_state_layers()`` (the model defines it); 0.18.0 and
   later ask for ``get_eagle3_default_aux_hidden_state_layers()`` and route
   ``set_aux_hidden_state_layers`` through ``EagleModelMixin`` on ``GraniteModel``. The check
   calls the one the installed release's runner calls.
2. The real ``GraniteModel.forward``, driven with stand-in decoder layers, embedding, norm and a
   single-stage pipeline group, returns ``(hidden, aux)`` whose entries are the residual stream
   entering each requested layer (layer 0 included), and the plain tensor when no aux layers
   are asked for. A Granite decoder layer adds its own residual, so that stream is the hidden
   state passed into the layer.
3. Where the release still has the EAGLE-3 allow-list (through 0.21.x), the real
   ``SpeculativeConfig`` (method ``eagle3``) accepts a tiny ``granite`` target and still rejects
   ``granitemoe``, which the list's substring match would admit if ``"granite"`` were an entry
   but whose model has no EAGLE-3 support.
"""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3

MODULE = "vllm.model_executor.models.granite"
NUM_LAYERS = 40  # Granite 3.x 8B: vLLM's default aux layers are then (2, 20, 37)


def _granite() -> Any:
    try:
        return importlib.import_module(MODULE)
    except Exception as exc:
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc


def check_supports_eagle3(ctx: Any) -> None:
    """GraniteForCausalLM implements SupportsEagle3 with working default and setter."""
    eagle3.implements_supports_eagle3(
        _granite(),
        family="Granite",
        causal_lm="GraniteForCausalLM",
        model="GraniteModel",
        num_layers=NUM_LAYERS,
        wanted=(3, 21, 38),
    )


def check_forward_returns_aux_states(ctx: Any) -> None:
    """The real GraniteModel.forward captures the residual stream entering requested layers."""
    # A Granite decoder layer adds its own residual; forward scales the embedding.
    eagle3.forward_captures_aux(
        _granite(),
        model="GraniteModel",
        layer=eagle3.PlainLayer,
        config={"embedding_multiplier": 3.0},
    )


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
    if model_type == "granitemoe":
        config.update(num_local_experts=4, num_experts_per_tok=2)
    return config


def check_speculative_config_accepts_granite(ctx: Any) -> None:
    """The real SpeculativeConfig accepts EAGLE-3 for a granite target (and still rejects granitemoe)."""
    if not eagle3.has_allow_list():
        ctx.skip(
            f"vLLM {ctx.version} has no EAGLE-3 allow-list in vllm/config/speculative.py "
            "(gone from 0.22.0): the runner's SupportsEagle3 check above is the gate"
        )
    from vllm.config import ModelConfig

    drafter = checkpoints.folder(ctx, "eagle3_drafter", checkpoints.DRAFTER_CONFIG)

    def target(model_type: str, architecture: str) -> Any:
        path = checkpoints.folder(
            ctx, f"{model_type}_target", _target_config(model_type, architecture)
        )
        try:
            config = ModelConfig(model=path, skip_tokenizer_init=True)
        except Exception as exc:
            raise RuntimeError(
                f"could not build the ModelConfig of a tiny {model_type} target: {eagle3.rejection(exc)}"
            ) from exc
        got = config.hf_text_config.model_type
        if got != model_type:
            raise RuntimeError(
                f"the tiny {model_type} target loaded with model_type {got!r}; "
                "the check cannot judge the allow-list"
            )
        return config

    try:
        eagle3.speculative_config(target("granite", "GraniteForCausalLM"), drafter)
    except Exception as exc:
        why = eagle3.rejection(exc)
        if "only supported" in why:
            raise AssertionError(
                "vLLM's SpeculativeConfig rejects EAGLE-3 for a granite target: the allow-list "
                f"check in vllm/config/speculative.py does not admit 'granite' (vLLM said: {why})"
            ) from exc
        raise AssertionError(
            f"SpeculativeConfig(method='eagle3') failed for a granite target: {why}"
        ) from exc

    try:
        eagle3.speculative_config(target("granitemoe", "GraniteMoeForCausalLM"), drafter)
    except Exception as exc:
        if "only supported" not in eagle3.rejection(exc):
            raise AssertionError(
                "SpeculativeConfig(method='eagle3') failed for the granitemoe control target, "
                f"but not with the allow-list error: {eagle3.rejection(exc)}"
            ) from exc
    else:
        raise AssertionError(
            "SpeculativeConfig accepted EAGLE-3 for a granitemoe target, whose model has no "
            "EAGLE-3 support: the allow-list admits every model_type containing 'granite' "
            "instead of granite exactly"
        )
