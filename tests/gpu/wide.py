"""The controlled pair of ``tests/e2e/engine_models.py`` at a real hidden size: the same tiny
target and drafters, every hidden dimension padded with zeros from 128 to ``--hidden`` (4096: the
8B shape's), so the engine runs real-size activations, norms and fused kernels while the
acceptance stays set by construction (100% with the right aux layers, about 0% shifted by one).

    python -m tests.gpu.wide SRC DST [--hidden 4096]     (SRC: engine_models.py's folder)

A family target of ``tests/e2e/family_models.py`` (its own mixers, MoE and norms) is widened by
``widen_built``: the builder runs once at 128 for the weights and once with the hidden size set
to ``--hidden`` for the shapes (and the config values it derives from the hidden size: head
counts where the head size is hidden / heads), and every dimension that differs between the two
is the hidden one (or one that grows with it, such as Granite 4's Mamba inner size), padded with
zeros (no rule per tensor name: the intermediate and head sizes that happen to be 128 stay as
they are). A 1-dim tensor that widens is an RMSNorm weight, scaled as below (``1 + w`` for the
Gemma-style norms of Qwen3-Next, Gemma 2 and Gemma 3), or one whose values add nothing (a zero
bias, a Mamba head's ``A_log``, ``D`` or ``dt_bias`` where its input is zero). Gemma multiplies
its embedding by ``sqrt(hidden)``: its widened embedding is scaled by ``sqrt(128 / hidden)``.

Why the numbers survive: a zero-padded vector has the same dot products, and its RMS over
``hidden`` dims is its RMS over 128 times ``sqrt(128 / hidden)``; every RMSNorm weight is scaled by
that factor, so each normalised vector equals the 128-dim one in its first 128 dims and is zero
after them. The drafter's ``fc`` (3 aux states in) and its attention (embedding and hidden state
in) read each input block at its new offset. Runs with the image's torch and safetensors.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

NARROW = 128  # engine_models.H


def _pad(t: torch.Tensor, dim: int, width: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = width
    out = torch.zeros(shape, dtype=t.dtype)
    out.narrow(dim, 0, t.shape[dim]).copy_(t)
    return out


def _blocks(t: torch.Tensor, blocks: int, width: int) -> torch.Tensor:
    """Columns in ``blocks`` blocks of 128 (``fc``'s 3 aux states, the drafter attention's
    embedding and hidden halves) moved to blocks of ``width``."""
    out = torch.zeros(t.shape[0], blocks * width, dtype=t.dtype)
    for b in range(blocks):
        out[:, b * width : b * width + NARROW] = t[:, b * NARROW : (b + 1) * NARROW]
    return out


def widen_tensor(name: str, t: torch.Tensor, width: int, drafter: bool) -> torch.Tensor:
    scale = math.sqrt(NARROW / width)
    if name.endswith("norm.weight"):  # every RMSNorm: input_layernorm, hidden_norm, norm, ...
        return _pad(t.float() * scale, 0, width).to(t.dtype)
    if name == "fc.weight":
        return _pad(_blocks(t, 3, width), 0, width)
    if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
        return _blocks(t, 2, width) if drafter else _pad(t, 1, width)
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return _pad(t, 0, width)
    if name.endswith(("embed_tokens.weight", "lm_head.weight", "gate_proj.weight")):
        return _pad(t, 1, width)
    if name.endswith("up_proj.weight") or name.endswith("router.layer.weight"):
        return _pad(t, t.dim() - 1, width)
    if name.endswith("input_linear.weight"):  # Granite MoE: [experts, 2 x inter, hidden]
        return _pad(t, 2, width)
    if name.endswith("output_linear.weight"):  # [experts, hidden, inter]
        return _pad(t, 1, width)
    if name == "d2t" or t.dim() == 0:
        return t
    raise ValueError(f"no widening rule for {name} {list(t.shape)}")


def widen(src: Path, dst: Path, width: int) -> Path:
    config = json.loads((src / "config.json").read_text())
    drafter = any("Eagle3" in a for a in config.get("architectures", []))
    weights = load_file(str(src / "model.safetensors"))
    wide = {k: widen_tensor(k, v, width, drafter).contiguous() for k, v in weights.items()}
    if config["model_type"] == "granitemoe":
        # its attention's head size is hidden / heads (no head_dim key): as many heads of 64 as
        # fill the width, the new ones zero like every target attention of engine_models.py
        heads = width // config["head_dim"]
        for k, v in wide.items():
            if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
                wide[k] = _pad(v, 0, heads * config["head_dim"]).contiguous()
            elif k.endswith("o_proj.weight"):
                wide[k] = _pad(v, 1, heads * config["head_dim"]).contiguous()
        config["num_attention_heads"] = config["num_key_value_heads"] = heads
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy2(f, dst / f.name)
    save_file(wide, str(dst / "model.safetensors"))
    config["hidden_size"] = width
    if drafter:
        config["target_hidden_size"] = width
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    return dst


def _shapes(
    build: Callable[[Path, int], None], hidden: int
) -> tuple[dict[str, list[int]], dict[str, object]]:
    """What ``build`` would save, at ``hidden``: its tensors' shapes and its config (nothing is
    written)."""
    from tests.e2e import family_models as fm

    em, got, config = fm.em, {}, {}
    save, narrow = em._save, (em.H, fm.H)

    def record(d: Path, w: dict[str, torch.Tensor], c: dict[str, object]) -> None:
        got.update({k: list(v.shape) for k, v in w.items()})
        config.update(c)

    em._save = record
    em.H = fm.H = hidden
    try:
        build(Path("/nonexistent"), 0)
    finally:
        em._save = save
        em.H, fm.H = narrow
    return got, config


GEMMA_NORM = ("qwen3_next", "gemma3_text", "gemma2")  # RMSNorm weight w scales by 1 + w
GEMMA_EMBED = ("gemma3_text", "gemma2")  # the model multiplies the embedding by sqrt(hidden)


def _widen_1d(name: str, t: torch.Tensor, config: dict[str, object], width: int) -> torch.Tensor:
    """A 1-dim tensor of the hidden size: an RMSNorm weight, its normalised vector kept (``1 +
    w`` norms as such). The final norm of a Gemma whose LM head is its embedding (Gemma 2) is
    kept as it is: its output grows by ``sqrt(width / 128)``, which undoes the embedding's
    scaling in the logits (``widen_built``), so they stay the 128-dim model's."""
    f, scale = t.float(), math.sqrt(NARROW / width)
    if config["model_type"] not in GEMMA_NORM:
        return (f * scale).to(t.dtype)
    if name == "model.norm.weight" and config.get("tie_word_embeddings"):
        return t
    return ((f + 1) * scale - 1).to(t.dtype)


def widen_built(build: Callable[[Path, int], None], dst: Path, width: int) -> Path:
    """The target ``build`` writes (a ``family_models`` builder), widened to ``width``. Config
    values the builder derives from the hidden size (the head counts of a family whose head size
    is hidden / heads: Qwen2-MoE, Granite 4's attention and Mamba) come from its build at
    ``width``. A Gemma multiplies its embedding by ``sqrt(hidden)``: the widened embedding is
    scaled by ``sqrt(128 / width)`` so the stream keeps its values."""
    src = dst.with_name(dst.name + "-narrow")
    build(src, 0)
    wide_shapes, wide_config = _shapes(build, width)
    config = json.loads((src / "config.json").read_text())
    weights = load_file(str(src / "model.safetensors"))
    if set(weights) != set(wide_shapes):
        raise ValueError(f"{dst.name}: the builder names other tensors at hidden {width}")
    wide = {}
    for name, t in weights.items():
        shape = wide_shapes[name]
        if list(t.shape) != shape and t.dim() == 1:  # an RMSNorm of the hidden size
            t = _widen_1d(name, t, config, width)
        if name == "model.embed_tokens.weight" and config["model_type"] in GEMMA_EMBED:
            t = (t.float() * math.sqrt(NARROW / width)).to(t.dtype)
        out = torch.zeros(shape, dtype=t.dtype)
        out[tuple(slice(0, n) for n in t.shape)] = t
        wide[name] = out.contiguous()
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy2(f, dst / f.name)
    save_file(wide, str(dst / "model.safetensors"))
    config.update({k: v for k, v in wide_config.items() if config.get(k) != v})
    (dst / "config.json").write_text(json.dumps({**config, "hidden_size": width}, indent=1))
    shutil.rmtree(src)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--hidden", type=int, default=4096)
    a = ap.parse_args()
    for name in ("target", "llama-target", "granitemoe-target", "right", "shifted"):
        widen(a.src / name, a.dst / name, a.hidden)
    print(json.dumps({"widened": str(a.dst), "hidden": a.hidden}))


if __name__ == "__main__":
    main()
