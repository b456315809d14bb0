"""The MoE families of ``family_models.py`` (its ``BUILDERS`` lists these too): the same
construction, each family's own layers and config keys as vLLM 0.25.0 and 0.32.0 read them.

Every MoE here has four experts, each that same MLP (zero but layer 2's), a zero router and any
shared expert zero, so the layer's routed sum is exactly the one MLP: top-2 renormalised (or, where
the family does not renormalise, each expert's down times ``EXPERTS / TOP_K``; times
``1 / routed_scaling_factor`` where the family scales the routed sum). The hidden size is read
from ``em.H`` at each call (``tests/gpu/wide.py`` sets it to learn the widened shapes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_models as em  # noqa: E402

HD = em.HD
EXPERTS, TOP_K, MOE_INTER = 4, 2, 128


def _zeros(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape)


def _mlp(w: dict[str, torch.Tensor], p: str, layer: int, inter: int, scale: float = 1.0) -> None:
    """``p``{gate,up,down}_proj: layer ``layer``'s MLP (zero but layer 2's), its down times
    ``scale``."""
    gate, up, down = em.mlp(layer, inter)
    w[p + "gate_proj.weight"], w[p + "up_proj.weight"] = gate, up
    w[p + "down_proj.weight"] = down * scale


def _experts(w: dict[str, torch.Tensor], p: str, layer: int, scale: float = 1.0) -> None:
    for e in range(EXPERTS):
        _mlp(w, p + f"experts.{e}.", layer, MOE_INTER, scale)


def _attention(w: dict[str, torch.Tensor], a: str, bias: bool = False, heads: int = 0) -> None:
    """``a``{q,k,v,o}_proj of ``heads`` heads and KV heads (``em.HEADS`` by default) of ``HD``,
    adding zero."""
    heads = heads or em.HEADS
    for name in ("q_proj", "k_proj", "v_proj"):
        w[a + f"{name}.weight"] = _zeros(heads * HD, em.H)
        if bias:
            w[a + f"{name}.bias"] = _zeros(heads * HD)
    w[a + "o_proj.weight"] = _zeros(em.H, heads * HD)


def _norms(w: dict[str, torch.Tensor], p: str) -> None:
    w[p + "input_layernorm.weight"] = torch.ones(em.H)
    w[p + "post_attention_layernorm.weight"] = torch.ones(em.H)


def _glm_mlp(w: dict[str, torch.Tensor], m: str, layer: int, scaling: float) -> None:
    """GLM-4.5's MLP: layer 0 dense (``first_k_dense_replace`` 1), then the MoE: the sigmoid
    router ``gate`` with its ``e_score_correction_bias``, the experts (scaled by ``1 /
    scaling``, the routed_scaling_factor vLLM applies to the routed sum) and one shared expert."""
    if layer == 0:
        _mlp(w, m, layer, em.INTER)
        return
    w[m + "gate.weight"] = _zeros(EXPERTS, em.H)
    w[m + "gate.e_score_correction_bias"] = _zeros(EXPERTS)
    _experts(w, m, layer, 1.0 / scaling)
    _mlp(w, m + "shared_experts.", -1, MOE_INTER)  # zero


_GLM_MOE = {  # the MoE keys GLM-4.5 and GLM-4.7-Flash share (vLLM's Glm4MoE reads them)
    "first_k_dense_replace": 1, "n_routed_experts": EXPERTS, "n_shared_experts": 1,
    "num_experts_per_tok": TOP_K, "moe_intermediate_size": MOE_INTER, "n_group": 1,
    "topk_group": 1, "norm_topk_prob": True, "num_nextn_predict_layers": 0, "pad_token_id": 0,
}  # fmt: skip


def glm4_moe(d: Path, seed: int = 0) -> None:
    """GLM-4.5: GQA attention with q/k/v biases and QK norms, RoPE on half the head
    (``partial_rotary_factor``); layer 0 a dense MLP, 1-7 an MoE (sigmoid router with
    ``e_score_correction_bias``, one group, top-2 of 4 renormalised, ``routed_scaling_factor``
    1.0) plus one shared expert."""
    w = em.stream(seed)
    for layer in range(em.L):
        p = f"model.layers.{layer}."
        _norms(w, p)
        _attention(w, p + "self_attn.", bias=True)
        w[p + "self_attn.q_norm.weight"] = torch.ones(HD)
        w[p + "self_attn.k_norm.weight"] = torch.ones(HD)
        _glm_mlp(w, p + "mlp.", layer, 1.0)
    em._save(d, w, {
        **em._COMMON, **_GLM_MOE, "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe", "num_hidden_layers": em.L, "attention_bias": True,
        "use_qk_norm": True, "partial_rotary_factor": 0.5, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-5, "routed_scaling_factor": 1.0,
    })  # fmt: skip


def glm4_moe_lite(d: Path, seed: int = 0) -> None:
    """GLM-4.7-Flash: DeepSeek's MLA (q_a/q_b with ``q_lora_rank``, ``kv_a_proj_with_mqa`` and
    ``kv_b_proj`` with ``kv_lora_rank``, GLM-4.7-Flash's head dims: KV cache rows of 512 + 64 as
    the GPU MLA kernels want), the GLM-4.5 MLP and MoE with ``routed_scaling_factor`` 1.8."""
    heads, q_rank, kv_rank, nope, rope, v_dim, scaling = 4, 768, 512, 192, 64, 256, 1.8
    w = em.stream(seed)
    for layer in range(em.L):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        _norms(w, p)
        w[a + "q_a_proj.weight"] = _zeros(q_rank, em.H)
        w[a + "q_a_layernorm.weight"] = torch.ones(q_rank)
        w[a + "q_b_proj.weight"] = _zeros(heads * (nope + rope), q_rank)
        w[a + "kv_a_proj_with_mqa.weight"] = _zeros(kv_rank + rope, em.H)
        w[a + "kv_a_layernorm.weight"] = torch.ones(kv_rank)
        w[a + "kv_b_proj.weight"] = _zeros(heads * (nope + v_dim), kv_rank)
        w[a + "o_proj.weight"] = _zeros(em.H, heads * v_dim)
        _glm_mlp(w, p + "mlp.", layer, scaling)
    config = {k: v for k, v in em._COMMON.items() if k != "head_dim"}  # head_dim: qk_rope's
    em._save(d, w, {
        **config, **_GLM_MOE, "architectures": ["Glm4MoeLiteForCausalLM"],
        "model_type": "glm4_moe_lite", "num_hidden_layers": em.L,
        "num_attention_heads": heads, "num_key_value_heads": heads, "q_lora_rank": q_rank,
        "kv_lora_rank": kv_rank, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
        "v_head_dim": v_dim, "rope_interleave": True, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-5, "attention_bias": False, "routed_scaling_factor": scaling,
        "mlp_layer_types": ["dense"] + ["sparse"] * (em.L - 1),
    })  # fmt: skip


def mixtral(d: Path, seed: int = 0) -> None:
    """Mixtral: GQA attention, every layer a ``block_sparse_moe`` (router ``gate``, experts
    ``w1`` gate, ``w3`` up, ``w2`` down), top-2 of 4 with softmax scores renormalised."""
    w = em.stream(seed)
    for layer in range(em.L):
        p = f"model.layers.{layer}."
        _norms(w, p)
        _attention(w, p + "self_attn.")
        m = p + "block_sparse_moe."
        w[m + "gate.weight"] = _zeros(EXPERTS, em.H)
        gate, up, down = em.mlp(layer)
        for e in range(EXPERTS):
            w[m + f"experts.{e}.w1.weight"] = gate.clone()
            w[m + f"experts.{e}.w3.weight"] = up.clone()
            w[m + f"experts.{e}.w2.weight"] = down.clone()
    em._save(d, w, {
        **em._COMMON, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "num_hidden_layers": em.L, "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K,
        "rope_theta": 1000000.0, "sliding_window": None, "rms_norm_eps": 1e-5,
        "router_aux_loss_coef": 0.02, "output_router_logits": False,
    })  # fmt: skip


def qwen2_moe(d: Path, seed: int = 0) -> None:
    """Qwen1.5-MoE / Qwen2-MoE: attention with q/k/v biases, every layer an MoE with softmax
    scores not renormalised (``norm_topk_prob`` false: each expert's down doubled) and a shared
    expert behind its sigmoid ``shared_expert_gate`` (all zero). vLLM takes its head size as
    hidden / heads (no ``head_dim`` key): ``H / HD`` heads of ``HD``, so a widened copy (at
    ``tests/gpu/wide.py``'s hidden size) needs ``num_attention_heads`` and
    ``num_key_value_heads`` set to ``hidden / HD`` as ``wide.widen`` does for Granite MoE."""
    heads = em.H // HD
    w = em.stream(seed)
    for layer in range(em.L):
        p = f"model.layers.{layer}."
        m = p + "mlp."
        _norms(w, p)
        _attention(w, p + "self_attn.", bias=True, heads=heads)
        w[m + "gate.weight"] = _zeros(EXPERTS, em.H)
        _experts(w, m, layer, EXPERTS / TOP_K)  # zero router: softmax 1/4 each, top-2 sum 1/2
        _mlp(w, m + "shared_expert.", -1, MOE_INTER)  # zero
        w[m + "shared_expert_gate.weight"] = _zeros(1, em.H)
    em._save(d, w, {
        **em._COMMON, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
        "num_hidden_layers": em.L, "num_attention_heads": heads, "num_key_value_heads": heads,
        "rope_theta": 1000000.0, "num_experts": EXPERTS,
        "num_experts_per_tok": TOP_K, "moe_intermediate_size": MOE_INTER,
        "shared_expert_intermediate_size": MOE_INTER, "norm_topk_prob": False,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": em.L, "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
    })  # fmt: skip


BUILDERS = {
    "glm4_moe": glm4_moe,
    "glm4_moe_lite": glm4_moe_lite,
    "mixtral": mixtral,
    "qwen2_moe": qwen2_moe,
}
