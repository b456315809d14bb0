"""The EAGLE-3 methods of the real DeepSeek-V2/V3 and Kimi-K2.5 classes, on bare instances.

The models are made with ``__new__`` plus ``torch.nn.Module.__init__`` (no weights, no config):
61 identity layers stand in for DeepSeek-V3's decoder layers, which is all the methods look at.
"""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import eagle3


def _causal_lm() -> Any:
    """A DeepseekV2ForCausalLM over a DeepseekV2Model with 61 stand-in layers."""
    import torch
    from vllm.model_executor.models import deepseek_v2 as ds

    lm = eagle3.bare(ds.DeepseekV2ForCausalLM)
    lm.model = eagle3.bare(ds.DeepseekV2Model)
    lm.model.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(61)])
    lm.model.aux_hidden_state_layers = ()
    return lm


def check_default_layers(ctx: Any) -> str:
    """default aux layers for 61 layers"""
    got = tuple(_causal_lm().get_eagle3_aux_hidden_state_layers())
    if got != (2, 30, 58):
        raise AssertionError(f"got {got}, expected (2, 30, 58)")
    return f"got {got}"


def check_set_layers(ctx: Any) -> None:
    """set_aux_hidden_state_layers reaches DeepseekV2Model"""
    lm = _causal_lm()
    lm.set_aux_hidden_state_layers((3, 31, 59))
    stored = tuple(lm.model.aux_hidden_state_layers)
    if stored != (3, 31, 59):
        raise AssertionError(f"model.aux_hidden_state_layers is {stored} after setting (3, 31, 59)")


def check_kimi_delegation(ctx: Any) -> None:
    """KimiK25ForConditionalGeneration delegates EAGLE-3 methods"""
    import torch

    eagle3.skip_without_kimi_k25(ctx)
    kimi = importlib.import_module(eagle3.KIMI_K25)
    from vllm.model_executor.models import deepseek_v2 as ds

    inner = eagle3.bare(ds.DeepseekV2Model)
    inner.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(61)])
    inner.aux_hidden_state_layers = ()
    model = eagle3.bare(kimi.KimiK25ForConditionalGeneration)
    # 0.16 and later build the language model with init_vllm_registered_model as a
    # DeepseekV2ForCausalLM; 0.15.x builds a bare DeepseekV2Model.
    if hasattr(kimi, "init_vllm_registered_model"):
        lm = eagle3.bare(ds.DeepseekV2ForCausalLM)
        lm.model = inner
        model.language_model = lm
    else:
        model.language_model = inner
    model.set_aux_hidden_state_layers((3, 31, 59))
    got = tuple(model.get_eagle3_aux_hidden_state_layers())
    stored = tuple(inner.aux_hidden_state_layers)
    if stored != (3, 31, 59) or got != (2, 30, 58):
        raise AssertionError(f"language model aux layers {stored}, default {got}")
