"""A codemod by the name a patch.toml gives it (``codemod = "module:function"``, a function of a
module of this package), run on one file: ``rewrite``, through the ``cache``.

The catalogue holds the name as written (``catalogue.model.FileChange``); it is resolved here,
when a file goes through the codemod, never when the catalogue loads. A codemod that was renamed
keeps its old name working (``RENAMED``), for a patches folder written before the rename (a copy
of the built-ins given as ``VLLM_PATCHER_PATCHES_DIR``): the same function, the same bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from . import Rewrite, cache

if TYPE_CHECKING:
    from ..catalogue.family import Family

# A codemod's old name -> its name now (module:function under vllm_patcher.transforms).
RENAMED = MappingProxyType(
    {
        # eagle3-whitelist's entries, in one module with a family's clause on the same list
        "whitelist:rewrite": "allow_list:append_deepseek_kimi",
        # whose image token each one reads: Kimi-K2.5's, Qwen3-VL's
        "image_token:rewrite": "image_token_kimi:rewrite",
        "vl_image_token:rewrite": "image_token_qwen3_vl:rewrite",
    }
)


class Change(Protocol):
    """What a codemod run reads of a ``FileChange``."""

    @property
    def path(self) -> str: ...

    @property
    def transform(self) -> str: ...

    @property
    def family(self) -> Family | None: ...


def resolved(name: str) -> str:
    """The codemod's name now (``RENAMED``), or ``name`` as given."""
    return RENAMED.get(name, name)


def function(name: str) -> Callable[..., Rewrite]:
    """The codemod named ``module:function`` (an old name resolved first)."""
    module_name, func_name = resolved(name).split(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    found: Callable[..., Rewrite] = getattr(module, func_name)
    return found


def rewrite(change: Change, source: str, version: str | None = None) -> Rewrite:
    """``source`` (the file ``change.path``) rewritten by ``change``'s codemod; a family codemod
    also gets the family and the release (its generation decides the shape of the change)."""
    name = resolved(change.transform)

    def run() -> Rewrite:
        func = function(name)
        if change.family is not None:
            result: Rewrite = func(source, change.path, family=change.family, version=version)
        else:
            result = func(source, change.path)
        return result

    # a family codemod's output depends on the family and the release; the others' on neither
    extra = "" if change.family is None else f"{change.family!r} {version!r}"
    return cache.cached(run, source, change.path, name, extra)
