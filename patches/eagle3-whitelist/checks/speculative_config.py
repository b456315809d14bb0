"""The real SpeculativeConfig (method eagle3) on tiny local config folders.

A server builds exactly this before any proposer exists: a target ``ModelConfig`` from the
checkpoint's config.json, then ``SpeculativeConfig`` with the drafter, which refuses target
families outside the EAGLE-3 allow-list. The folders hold a config.json only (no weights); the
probe runs with the Hugging Face hub offline.
"""

from __future__ import annotations

from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3


def _eagle3(ctx: Any, name: str, cfg: dict[str, Any], whole: bool = False) -> tuple[bool, str]:
    """Build the target ModelConfig and the eagle3 SpeculativeConfig: (accepted, why refused).

    ``why`` is the refusal's last line, or all of it (300 characters) with ``whole`` or when it is
    the allow-list's "only supported" refusal.
    """
    from vllm.config import ModelConfig

    path = checkpoints.folder(ctx, name, cfg)
    drafter = checkpoints.folder(ctx, "drafter", checkpoints.DRAFTER_CONFIG)
    try:
        target = ModelConfig(model=path, skip_tokenizer_init=True)
    except Exception as exc:
        raise AssertionError("could not build the target ModelConfig") from exc
    try:
        eagle3.speculative_config(target, drafter)
    except Exception as exc:
        return False, eagle3.refusal(exc, whole)
    return True, ""


def _accepts(ctx: Any, name: str, cfg: dict[str, Any]) -> None:
    accepted, why = _eagle3(ctx, name, cfg)
    if not accepted:
        raise AssertionError(f"rejected: {why}")


def check_accepts_deepseek_v3(ctx: Any) -> None:
    """SpeculativeConfig eagle3 accepts deepseek_v3"""
    _accepts(ctx, "deepseek_v3", checkpoints.DEEPSEEK_V3_CONFIG)


def check_accepts_kimi_k25(ctx: Any) -> None:
    """SpeculativeConfig eagle3 accepts kimi_k25"""
    eagle3.skip_without_kimi_k25(ctx)
    _accepts(ctx, "kimi_k25", checkpoints.KIMI_K25_CONFIG)


def check_rejects_gpt2(ctx: Any) -> None:
    """SpeculativeConfig eagle3 rejects gpt2 (not on the list)"""
    eagle3.skip_without_allow_list(ctx)
    accepted, why = _eagle3(ctx, "gpt2", checkpoints.GPT2_CONFIG, whole=True)
    if accepted:
        raise AssertionError("accepted a family the allow-list should still reject")
    if "only supported" not in why:
        raise AssertionError(f"failed: {why}")
