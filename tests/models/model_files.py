"""Model folders written by hand: target and drafter configs and real safetensors files (zero-filled,
sparse), for doctor and serve-args."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

HIDDEN = 7168
LAYERS = 61
DEEPSEEK_VOCAB = 129280
KIMI_VOCAB = 163840
DRAFT_VOCAB = 32000
MINIMAX_HIDDEN = 3072
MINIMAX_LAYERS = 62
MINIMAX_VOCAB = 200064
KEY = "eagle_aux_hidden_state_layer_ids"
DTYPE_BYTES = {"BF16": 2, "I64": 8, "BOOL": 1, "F32": 4}


# --- fixtures written by hand ----------------------------------------------------------------------


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def write_safetensors(
    path: Path,
    tensors: dict[str, tuple[str, list[int]]],
    metadata: dict[str, str] | None = None,
    values: dict[str, list[int]] | None = None,
) -> None:
    """A real safetensors file: length, JSON header, then zero bytes (sparse) for every tensor,
    but those of ``values`` (I64 tensors: their values, little-endian)."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = DTYPE_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)
        for name, numbers in (values or {}).items():
            fh.seek(8 + len(raw) + header[name]["data_offsets"][0])
            fh.write(struct.pack(f"<{len(numbers)}q", *numbers))


def deepseek_target(root: Path) -> Path:
    write_json(
        root / "DeepSeek-V3" / "config.json",
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "vocab_size": DEEPSEEK_VOCAB,
            "first_k_dense_replace": 3,
        },
    )
    return root / "DeepSeek-V3"


def kimi_target(root: Path) -> Path:
    write_json(
        root / "Kimi-K2.5" / "config.json",
        {
            "architectures": ["KimiK25ForConditionalGeneration"],
            "model_type": "kimi_k25",
            "media_placeholder_token_id": 163605,
            "text_config": {
                "model_type": "deepseek_v3",
                "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS,
                "vocab_size": KIMI_VOCAB,
            },
            "vision_config": {"hidden_size": 1152},
        },
    )
    return root / "Kimi-K2.5"


def minimax_target(root: Path) -> Path:
    """MiniMax-M2's config.json as the checkpoint ships it: flat, its config class via auto_map."""
    write_json(
        root / "MiniMax-M2" / "config.json",
        {
            "architectures": ["MiniMaxM2ForCausalLM"],
            "model_type": "minimax_m2",
            "auto_map": {"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config"},
            "hidden_size": MINIMAX_HIDDEN,
            "num_hidden_layers": MINIMAX_LAYERS,
            "vocab_size": MINIMAX_VOCAB,
            "num_local_experts": 256,
        },
    )
    return root / "MiniMax-M2"


def drafter_weights(
    names: str = "midlayer", d2t: bool = True, t2d: bool = True, fc_in: int = 3 * HIDDEN
) -> dict[str, tuple[str, list[int]]]:
    tensors: dict[str, tuple[str, list[int]]] = {
        "fc.weight": ("BF16", [HIDDEN, fc_in]),
        f"{names}.hidden_norm.weight": ("BF16", [HIDDEN]),
        f"{names}.input_layernorm.weight": ("BF16", [HIDDEN]),
        "norm.weight": ("BF16", [HIDDEN]),
    }
    if d2t:
        tensors["d2t"] = ("I64", [DRAFT_VOCAB])
    if t2d:
        tensors["t2d"] = ("BOOL", [KIMI_VOCAB])
    return tensors


def specforge_drafter(
    root: Path,
    name: str = "drafter",
    vocab: int = KIMI_VOCAB,
    nested: list[int] | None = None,
    weights: dict[str, tuple[str, list[int]]] | None = None,
    **overrides: Any,
) -> Path:
    """A drafter config the way SpecForge exports one: aux ids nested, in SGLang's convention."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 64,
        "vocab_size": vocab,
        "draft_vocab_size": DRAFT_VOCAB,
    }
    if nested is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": nested}
    for key, value in overrides.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    write_json(root / name / "config.json", config)
    if weights is not None:
        write_safetensors(root / name / "model.safetensors", weights)
    return root / name


def ready_kimi_pair(root: Path) -> tuple[Path, Path]:
    """A Kimi-K2.5 target and a drafter doctor passes on 0.15.1 (top-level key already set)."""
    drafter = specforge_drafter(
        root, nested=[2, 30, 58], weights=drafter_weights(), **{KEY: [3, 31, 59]}
    )
    return kimi_target(root), drafter


def minimax_drafter(root: Path, **overrides: Any) -> Path:
    return specforge_drafter(
        root,
        vocab=MINIMAX_VOCAB,
        hidden_size=MINIMAX_HIDDEN,
        weights=drafter_weights(fc_in=3 * MINIMAX_HIDDEN),
        **overrides,
    )
