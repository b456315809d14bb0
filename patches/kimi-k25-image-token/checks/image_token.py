"""Run the release's own EagleProposer for a Kimi-K2.5 target, up to the image-token branch."""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3, proposer


def check_image_token(ctx: Any) -> str:
    """EAGLE proposer reads Kimi-K2.5's image token from media_placeholder_token_id

    The real ``EagleProposer.load_model`` of the release, for a config-only kimi_k25 checkpoint
    (the real ``KimiK25Config``) with an EAGLE-3 drafter, driven up to the image-token branch
    (``checklib/proposer.py`` says what is real and what is stood in).
    """
    eagle3.skip_without_kimi_k25(ctx)
    kimi = importlib.import_module(eagle3.KIMI_K25)
    configs = proposer.engine(ctx, "kimi_k25", checkpoints.KIMI_K25_CONFIG)
    token = configs[0].hf_config.media_placeholder_token_id
    got = proposer.drafter_image_token(
        ctx, kimi.KimiK25ForConditionalGeneration, configs, "Kimi-K2.5"
    )
    if got != token:
        raise AssertionError(f"drafter image_token_index is {got}, expected {token}")
    return f"image_token_index {got}"
