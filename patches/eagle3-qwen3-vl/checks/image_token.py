"""Run the release's own EagleProposer for Qwen3-VL and Qwen3-VL-MoE targets, up to the
image-token branch."""

from __future__ import annotations

from typing import Any

from vllm_patcher_checklib import eagle3, proposer

TOKEN = 1001  # the tiny targets' image token (their vocabulary: 1024)
TEXT = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
}
VISION = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "out_hidden_size": 256,
    "deepstack_visual_indexes": [0],
}
TARGETS = {  # model_type -> (module, class, text model_type)
    "qwen3_vl": ("qwen3_vl", "Qwen3VLForConditionalGeneration", "qwen3_vl_text"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe_text"),
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}


def _config(model_type: str) -> dict[str, Any]:
    _, cls, text_type = TARGETS[model_type]
    text = {**TEXT, "model_type": text_type, **(MOE if model_type.endswith("moe") else {})}
    return {
        "model_type": model_type,
        "architectures": [cls],
        "image_token_id": TOKEN,
        "text_config": text,
        "vision_config": {**VISION, "model_type": model_type.replace("_moe", "") + "_vision"}
        if not model_type.endswith("moe")
        else {**VISION, "model_type": "qwen3_vl_moe_vision"},
        "torch_dtype": "bfloat16",
    }


def check_image_token(ctx: Any) -> str:
    """EAGLE proposer reads Qwen3-VL's image token from image_token_id

    The real ``EagleProposer.load_model`` of the release, for config-only qwen3_vl and
    qwen3_vl_moe checkpoints with an EAGLE-3 drafter, driven up to the image-token branch
    (``checklib/proposer.py`` says what is real and what is stood in): the drafter gets the
    target's ``image_token_id`` (its config has no ``image_token_index``).
    """
    done = []
    for model_type, (module, cls, _) in TARGETS.items():
        models = eagle3.model_module(ctx, f"vllm.model_executor.models.{module}")
        target_class = getattr(models, cls)
        configs = proposer.engine(ctx, model_type, _config(model_type))
        got = proposer.drafter_image_token(ctx, target_class, configs, cls)
        if got != TOKEN:
            raise AssertionError(f"{cls}: drafter image_token_index is {got}, expected {TOKEN}")
        done.append(f"{model_type} {got}")
    return "image_token_index: " + ", ".join(done)
