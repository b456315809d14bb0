"""The controlled pair of ``tests/e2e/engine_models.py`` at a real hidden size: the same tiny
target and drafters, every hidden dimension padded with zeros from 128 to ``--hidden`` (4096: the
8B shape's), so the engine runs real-size activations, norms and fused kernels while the
acceptance stays set by construction (100% with the right aux layers, about 0% shifted by one).

    python -m tests.gpu.wide SRC DST [--hidden 4096]     (SRC: engine_models.py's folder)

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
