"""Which patches a target model needs: its family (read from the catalogue's ``[family]`` tables,
else the built-in DeepSeek-V3, MiniMax-M2 and Granite sets) and what those patches need in turn.

The one owner of "this model_type needs these patches": ``apply --model``, ``status``/``verify``
``--model`` and doctor all ask here. Only model_type strings come in (the caller reads the
config), so this module reads no file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .model import Catalogue

DEEPSEEK_V3_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25")
DEEPSEEK_PATCHES = ("eagle3-whitelist", "supports-eagle3")
KIMI_K25_PATCHES = ("kimi-k25-image-token",)
MINIMAX_M2 = "minimax_m2"
MINIMAX_M2_PATCHES = ("eagle3-minimax-m2",)
# exactly this model_type: granitemoe, granitemoeshared and granitemoehybrid are families of
# their own
GRANITE = "granite"
GRANITE_PATCHES = ("eagle3-granite",)


class Family(NamedTuple):
    name: str  # as the docs say it: "DeepSeek-V3-family", "Granite", ...
    patches: tuple[str, ...]  # the built-ins its EAGLE-3 needs, ``needs`` included


def family_of(model_types: Iterable[str | None], catalogue: Catalogue) -> Family | None:
    """The family of a target whose config says ``model_types`` (its own and its text
    config's), or None when no patch here is for it. A ``[family]`` table wins; then the three
    built-in families."""
    types = {t for t in model_types if t}
    for patch in catalogue.patches:
        family = patch.family
        if family is not None and types & set(family.model_types):
            return Family(family.name, with_needs(catalogue, (patch.name,)))
    if MINIMAX_M2 in types:
        return Family("MiniMax-M2", MINIMAX_M2_PATCHES)
    if GRANITE in types:
        return Family("Granite", GRANITE_PATCHES)
    if types & set(DEEPSEEK_V3_TYPES):
        kimi = KIMI_K25_PATCHES if "kimi_k25" in types else ()
        return Family("DeepSeek-V3-family", DEEPSEEK_PATCHES + kimi)
    return None


def with_needs(catalogue: Catalogue, names: Iterable[str]) -> tuple[str, ...]:
    """``names`` and every patch they need (a ``[family]``'s ``needs``, transitively), in series
    order; a name the catalogue lacks is kept (the caller's selection refuses it by name)."""
    wanted = list(dict.fromkeys(names))
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        patch = catalogue.get(name)
        if patch is not None and patch.family is not None:
            wanted.extend(patch.family.needs)
    return tuple(sorted(seen, key=catalogue.order))


def pulled_in(catalogue: Catalogue, names: Iterable[str]) -> dict[str, str]:
    """The patches ``with_needs`` adds to ``names``: each with the named patch that needs it."""
    asked = list(dict.fromkeys(names))
    added: dict[str, str] = {}
    for name in asked:
        for need in with_needs(catalogue, (name,)):
            if need not in asked and need not in added:
                added[need] = name
    return added
