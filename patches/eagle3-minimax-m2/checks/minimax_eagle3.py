"""Behaviour checks for eagle3-minimax-m2: EAGLE-3 with a MiniMax-M2 target.

Run by the probe in the target's interpreter; each skips on releases without minimax_m2.py
(before 0.11.1). The first two are the check library's "a family implements EAGLE-3"
(``vllm_patcher_checklib.eagle3``) with MiniMax-M2's names and its 62 layers; its decoder layers
pass ``(hidden, residual)``, so the stream entering layer 0 is the embedding (``residual`` still
None). The third: the real ``SpeculativeConfig`` (method ``eagle3``) accepts a tiny
``minimax_m2`` target whose config class arrives through ``auto_map`` / ``trust_remote_code``,
as the real MiniMax-M2 checkpoint's does, and still rejects a family that is not on the
allow-list (while there is one, through 0.21.x).
"""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3

MODULE = "vllm.model_executor.models.minimax_m2"
# MiniMax-M2 and M2.1 have 62 layers: vLLM's default aux layers are then (2, 31, 59).
MINIMAX_M2 = eagle3.Family(
    "MiniMax-M2", "MiniMaxM2ForCausalLM", "MiniMaxM2Model", num_layers=62, wanted=(3, 31, 59)
)


def _minimax(ctx: Any) -> Any:
    """The installed minimax_m2 module; skip on releases that have none (before 0.11.1)."""
    try:
        return importlib.import_module(MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == MODULE:
            ctx.skip(
                f"vLLM {ctx.version} has no MiniMax-M2 model (minimax_m2.py arrived in 0.11.1)"
            )
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc


def check_supports_eagle3(ctx: Any) -> None:
    """MiniMaxM2ForCausalLM implements SupportsEagle3 with working default and setter."""
    eagle3.implements_supports_eagle3(_minimax(ctx), MINIMAX_M2)


def check_forward_returns_aux_states(ctx: Any) -> None:
    """The real MiniMaxM2Model.forward captures the residual stream entering requested layers."""
    eagle3.forward_captures_aux(_minimax(ctx), MINIMAX_M2)


TARGET_CONFIG = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "auto_map": {"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config"},
    "hidden_size": 256,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rotary_dim": 32,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "scoring_func": "sigmoid",
    "use_routing_bias": True,
    "use_qk_norm": True,
    "qk_norm_type": "per_layer",
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 5000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# What a MiniMax-M2 checkpoint ships next to its config.json (transformers 4.57 has no
# minimax_m2 config class); trimmed to what a config needs.
CONFIGURATION_MODULE = """
from transformers.configuration_utils import PretrainedConfig


class MiniMaxM2Config(PretrainedConfig):
    model_type = "minimax_m2"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=200064,
        hidden_size=3072,
        intermediate_size=1536,
        num_hidden_layers=62,
        num_attention_heads=48,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=196608,
        rms_norm_eps=1e-06,
        rope_theta=5000000,
        num_local_experts=256,
        num_experts_per_tok=8,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.num_local_experts = num_local_experts
        self.num_experts_per_tok = num_experts_per_tok
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
"""


def check_speculative_config_accepts_minimax_m2(ctx: Any) -> None:
    """The real SpeculativeConfig accepts EAGLE-3 for a minimax_m2 target (and still rejects gpt2)."""
    _minimax(ctx)
    drafter = checkpoints.folder(ctx, "eagle3_drafter", checkpoints.DRAFTER_CONFIG)
    target_dir = checkpoints.folder(
        ctx,
        "minimax_m2_target",
        TARGET_CONFIG,
        {"configuration_minimax_m2.py": CONFIGURATION_MODULE},
    )
    control_dir = checkpoints.folder(ctx, "gpt2_target", checkpoints.GPT2_CONFIG)

    with checkpoints.private_remote_code_cache(ctx.workdir):
        target = eagle3.model_config(
            target_dir,
            "a tiny minimax_m2 target (config class through auto_map and trust_remote_code)",
            trust_remote_code=True,
        )
        model_type = target.hf_text_config.model_type
        if model_type != "minimax_m2":
            raise RuntimeError(
                f"the tiny MiniMax-M2 target loaded with model_type {model_type!r}, "
                "not 'minimax_m2'; the check cannot judge the allow-list"
            )
        eagle3.accepts(
            target,
            drafter,
            "minimax_m2",
            "'minimax_m2' is not on the EAGLE-3 allow-list in vllm/config/speculative.py",
        )

    if not ctx.allow_list:
        return  # no allow-list to reject gpt2 with: the runner is the gate
    control = eagle3.model_config(control_dir, "the gpt2 control target")
    eagle3.refuses(
        control,
        drafter,
        "gpt2",
        ": the allow-list check in vllm/config/speculative.py was removed instead of widened",
    )
