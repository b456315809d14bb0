"""eagle3-whitelist: let the speculative config accept DeepSeek-V3-family targets for EAGLE-3.

``SpeculativeConfig`` rejects method ``eagle3`` unless the target's text model type contains one
of the strings in an allow-list (``eagle3_target_supported`` up to 0.16,
``aux_hidden_states_supported`` in 0.17). This appends ``deepseek_v2``, ``deepseek_v3``,
``kimi_k2`` and ``kimi_k25`` to that list, as upstream 0.18.0 does. The check itself stays.
"""

from __future__ import annotations

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import SPACE_COMMA, append_items, assign_target, body_of, classes, parse, replace_top
from ._cst import replace_statement as replace_in

PATCH = "eagle3-whitelist"
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
ADDED_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")


def _strings(node: cst.List) -> list[str]:
    values = []
    for element in node.elements:
        if not isinstance(element.value, cst.SimpleString):
            raise PatchShapeError("the EAGLE-3 allow-list holds something other than plain strings")
        values.append(str(element.value.evaluated_value))
    return values


def rewrite(source: str, path: str = "vllm/config/speculative.py") -> Rewrite:
    module = parse(source, path)
    # The list is a plain assignment at the top level of one SpeculativeConfig method.
    found = []
    for cls in classes(module):
        for fn in body_of(cls):
            if not isinstance(fn, cst.FunctionDef):
                continue
            for stmt in body_of(fn):
                name, value = assign_target(stmt)
                if name in ALLOW_LIST_NAMES and isinstance(value, cst.List):
                    found.append((cls, fn, stmt, value))
    if not found:
        raise PatchShapeError(
            f"{path}: no EAGLE-3 allow-list ({' or '.join(ALLOW_LIST_NAMES)} = [...]) found"
        )
    if len(found) > 1:
        raise PatchShapeError(f"{path}: {len(found)} EAGLE-3 allow-lists found, expected one")
    cls, fn, stmt, value = found[0]
    try:
        present = _strings(value)
    except PatchShapeError as exc:
        raise PatchShapeError(f"{path}: {exc.message}") from None
    missing = [t for t in ADDED_MODEL_TYPES if t not in present]
    if not missing:
        return Rewrite(source, changed=False)
    new = [cst.Element(cst.SimpleString(f'"{t}"')) for t in missing]
    new_value = value.with_changes(elements=append_items(value.elements, new, SPACE_COMMA))
    assert isinstance(stmt, cst.SimpleStatementLine)
    assign = stmt.body[0]
    assert isinstance(assign, cst.Assign)
    new_stmt = stmt.with_changes(body=[assign.with_changes(value=new_value)])
    new_cls = replace_in(cls, fn, replace_in(fn, stmt, new_stmt))
    return Rewrite(replace_top(module, cls, new_cls).code, changed=True)
