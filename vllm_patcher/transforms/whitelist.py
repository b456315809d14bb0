"""eagle3-whitelist: let the speculative config accept DeepSeek-V3-family targets for EAGLE-3.

``SpeculativeConfig`` rejects method ``eagle3`` unless the target's text model type contains one
of the strings in an allow-list (``eagle3_target_supported`` up to 0.16,
``aux_hidden_states_supported`` in 0.17). This appends ``deepseek_v2``, ``deepseek_v3``,
``kimi_k2`` and ``kimi_k25`` to that list, as upstream 0.18.0 does. The check itself stays.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import append_items, parse

PATCH = "eagle3-whitelist"
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
ADDED_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")

_ALLOW_LIST = m.Assign(
    targets=[m.AssignTarget(target=m.OneOf(*(m.Name(n) for n in ALLOW_LIST_NAMES)))],
    value=m.List(),
)


def _strings(node: cst.List) -> list[str]:
    values = []
    for element in node.elements:
        if not isinstance(element.value, cst.SimpleString):
            raise PatchShapeError("the EAGLE-3 allow-list holds something other than plain strings")
        values.append(str(element.value.evaluated_value))
    return values


class _AllowListWidener(m.MatcherDecoratableTransformer):
    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.missing: list[str] = []

    @m.leave(_ALLOW_LIST)
    def widen(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        self.found += 1
        value = updated.value
        assert isinstance(value, cst.List)
        present = _strings(value)
        self.missing = [t for t in ADDED_MODEL_TYPES if t not in present]
        if not self.missing:
            return updated
        new = [cst.Element(cst.SimpleString(f'"{t}"')) for t in self.missing]
        elements = append_items(
            value.elements, new, cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        return updated.with_changes(value=value.with_changes(elements=elements))


def rewrite(source: str, path: str = "vllm/config/speculative.py") -> Rewrite:
    module = parse(source, path)
    widener = _AllowListWidener()
    new = module.visit(widener)
    if widener.found == 0:
        raise PatchShapeError(
            f"{path}: no EAGLE-3 allow-list ({' or '.join(ALLOW_LIST_NAMES)} = [...]) found"
        )
    if widener.found > 1:
        raise PatchShapeError(f"{path}: {widener.found} EAGLE-3 allow-lists found, expected one")
    return Rewrite(new.code, changed=bool(widener.missing))
