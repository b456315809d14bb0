"""Real-size model shapes for the GPU proof: a ``config.json`` and a tokenizer, no weights (the
engine runs them with ``--load-format dummy``).

``python -m tests.gpu.shapes DIR`` writes ``DIR/granite-8b`` (granite-3.3-8b's shape: 40 layers,
hidden 4096, 32 heads, 8 KV heads, vocabulary 49159, tied embeddings, its muP multipliers),
``DIR/llama-8b`` (the same shape as a Llama) and ``DIR/drafter-8b`` (a one-layer
``LlamaForCausalLMEagle3``, hidden 4096, draft vocabulary 32000, aux layers 2, 20, 37). Runs with
the image's Python alone: ``tokenizers`` comes with transformers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VOCAB = 49159
AUX_LAYERS = (2, 20, 37)

_BASE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 4096,
    "intermediate_size": 12800,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "rope_theta": 10000000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
}

# granite-3.3-8b-instruct's own values
GRANITE: dict[str, Any] = {
    **_BASE,
    "architectures": ["GraniteForCausalLM"],
    "model_type": "granite",
    "num_hidden_layers": 40,
    "tie_word_embeddings": True,
    "attention_multiplier": 0.0078125,
    "embedding_multiplier": 12.0,
    "residual_multiplier": 0.22,
    "logits_scaling": 16.0,
}

LLAMA: dict[str, Any] = {
    **_BASE,
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 40,
    "tie_word_embeddings": True,
}

DRAFTER: dict[str, Any] = {
    **_BASE,
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "intermediate_size": 14336,
    "num_hidden_layers": 1,
    "tie_word_embeddings": False,
    "draft_vocab_size": 32000,
    "target_hidden_size": 4096,
    "eagle_aux_hidden_state_layer_ids": list(AUX_LAYERS),
}


def write(d: Path, config: dict[str, Any]) -> Path:
    """A model folder of ``config`` and a small word-level tokenizer (ids below the vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config, indent=1))
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(1024)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "t0",
                "eos_token": "t0",
                "bos_token": "t0",
                "model_max_length": 131072,
            }
        )
    )
    return d


def build(root: Path, **granite_overrides: Any) -> dict[str, Path]:
    return {
        "granite-8b": write(root / "granite-8b", {**GRANITE, **granite_overrides}),
        "llama-8b": write(root / "llama-8b", LLAMA),
        "drafter-8b": write(root / "drafter-8b", DRAFTER),
    }


if __name__ == "__main__":
    print(json.dumps({k: str(v) for k, v in build(Path(sys.argv[1])).items()}))
