"""The real model classes list SupportsEagle3: without it the model runner refuses EAGLE-3."""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import eagle3


def _listed(cls: Any) -> None:
    from vllm.model_executor.models.interfaces import supports_eagle3

    if not supports_eagle3(cls):
        raise AssertionError(
            f"{cls.__name__} does not list SupportsEagle3; the runner refuses EAGLE-3"
        )


def check_deepseek_v2(ctx: Any) -> None:
    """supports_eagle3(DeepseekV2ForCausalLM)"""
    from vllm.model_executor.models import deepseek_v2

    _listed(deepseek_v2.DeepseekV2ForCausalLM)


def check_deepseek_v3(ctx: Any) -> None:
    """supports_eagle3(DeepseekV3ForCausalLM)"""
    from vllm.model_executor.models import deepseek_v2

    _listed(deepseek_v2.DeepseekV3ForCausalLM)


def check_kimi_k25(ctx: Any) -> None:
    """supports_eagle3(KimiK25ForConditionalGeneration)"""
    eagle3.skip_without_kimi_k25(ctx)
    _listed(importlib.import_module(eagle3.KIMI_K25).KimiK25ForConditionalGeneration)
