"""Reading a target's config and a safetensors header (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_patcher.models.configs import read_safetensors_header, read_target

from .model_files import (
    DRAFT_VOCAB,
    HIDDEN,
    KIMI_VOCAB,
    drafter_weights,
    kimi_target,
    write_json,
    write_safetensors,
)


def test_read_target_uses_kimi_text_config(tmp_path: Path) -> None:
    target = read_target(kimi_target(tmp_path))
    assert (target.model_type, target.text_model_type) == ("kimi_k25", "deepseek_v3")
    assert (target.hidden_size, target.num_layers, target.vocab_size) == (HIDDEN, 61, KIMI_VOCAB)


def test_read_target_takes_top_level_vocab_when_text_config_lacks_it(tmp_path: Path) -> None:
    root = kimi_target(tmp_path)
    config = json.loads((root / "config.json").read_text())
    del config["text_config"]["vocab_size"]
    config["vocab_size"] = 163841
    write_json(root / "config.json", config)
    assert read_target(root).vocab_size == 163841


def test_safetensors_header_is_read_without_torch(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, drafter_weights(), metadata={"format": "pt", "producer": "SpecForge"})
    tensors = read_safetensors_header(path)
    assert "__metadata__" not in tensors
    assert tensors["fc.weight"].shape == (HIDDEN, 3 * HIDDEN)
    assert tensors["fc.weight"].dtype == "BF16"
    assert tensors["d2t"].shape == (DRAFT_VOCAB,)
    assert set(tensors) == set(drafter_weights())
