"""Model families and roles: which model_type is DeepSeek-V3, MiniMax-M2 or Granite (the rules
doctor keeps for those three), and whether a config is a target (of any family
``catalogue.targets`` knows) or an EAGLE-3 drafter."""

from __future__ import annotations

import json
from typing import Any

from ..catalogue.model import Catalogue
from ..catalogue.targets import DEEPSEEK_V3_TYPES, family_of
from ..catalogue.targets import GRANITE as GRANITE
from ..catalogue.targets import MINIMAX_M2 as MINIMAX_M2
from .configs import AUX_KEY, TargetModel

EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")


# the built-in families' model types: their one owner is catalogue.targets
DEEPSEEK_V3_FAMILY = DEEPSEEK_V3_TYPES


def is_deepseek_v3(target: TargetModel) -> bool:
    return target.text_model_type in DEEPSEEK_V3_FAMILY or target.model_type in DEEPSEEK_V3_FAMILY


def is_minimax_m2(target: TargetModel) -> bool:
    return MINIMAX_M2 in (target.model_type, target.text_model_type)


def is_granite(target: TargetModel) -> bool:
    return GRANITE in (target.model_type, target.text_model_type)


def _architectures(config: dict[str, Any]) -> list[str]:
    archs = config.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def looks_like_drafter(config: dict[str, Any]) -> bool:
    """An EAGLE head: its architecture says so, or it carries EAGLE-3's aux-layer key."""
    return (
        any("eagle" in a.lower() for a in _architectures(config))
        or AUX_KEY in config
        or isinstance(config.get("eagle_config"), dict)
    )


def _model_types(config: dict[str, Any]) -> set[str]:
    text = config.get("text_config")
    types = [config.get("model_type"), text.get("model_type") if isinstance(text, dict) else None]
    return {t for t in types if isinstance(t, str)}  # a list or an object names no type


def looks_like_target(config: dict[str, Any], catalogue: Catalogue | None = None) -> bool:
    """A model of a family doctor serves (never an EAGLE head): one ``catalogue.targets`` names
    a family for (the catalogue's ``[family]`` tables, then the built-in DeepSeek-V3, MiniMax-M2
    and Granite sets)."""
    if looks_like_drafter(config):
        return False
    return family_of(_model_types(config), catalogue or Catalogue(())) is not None


def described(config: dict[str, Any]) -> str:
    layers = config.get("num_hidden_layers")
    text = config.get("text_config")
    if layers is None and isinstance(text, dict):
        layers = text.get("num_hidden_layers")
    types = "/".join(sorted(_model_types(config))) or "none"
    count = f"{layers} layer{'s' * (layers != 1)}" if isinstance(layers, int) else "no layer count"
    return f"architectures {json.dumps(config.get('architectures'))}, model_type {types}, {count}"
