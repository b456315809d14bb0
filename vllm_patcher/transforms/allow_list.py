"""The EAGLE-3 allow-list of ``SpeculativeConfig``, widened two ways: two codemods on one list.

Through 0.21.x ``SpeculativeConfig`` refuses method ``eagle3`` unless the target's text model
type contains one of the strings in an allow-list (``eagle3_target_supported`` up to 0.16,
``aux_hidden_states_supported`` from 0.17). The check itself stays.

- ``append_deepseek_kimi`` (eagle3-whitelist): appends ``deepseek_v2``, ``deepseek_v3``,
  ``kimi_k2`` and ``kimi_k25`` to the list, as upstream 0.18.0 does.
- ``rewrite`` (a family's allow-list entry, ``catalogue.model.ALLOW_LIST_CODEMOD``): appending
  ``"granite"`` to the list would also admit ``granitemoe`` (whose model has no EAGLE-3
  support), so a family's entry is one more clause of the refusal's condition instead,
  ``and <model_type> != "granite"`` for each of its model types: the type itself is admitted and
  nothing else. A type the list already admits gets no clause; a release without the list
  (0.22.0 on) is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import (
    SPACE_COMMA,
    append_items,
    assign_target,
    body_of,
    classes,
    dotted,
    find_all,
    parse,
    replace_top,
)
from ._cst import replace_statement as replace_in

if TYPE_CHECKING:
    from ..catalogue.family import Family

SPEC = "vllm/config/speculative.py"
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
ADDED_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")  # eagle3-whitelist's

Found = tuple[cst.ClassDef, cst.FunctionDef, cst.BaseStatement, str, cst.BaseExpression]


def _allow_lists(module: cst.Module) -> list[Found]:
    """Each assignment of an allow-list name at the top level of a method of a top-level class
    (the list is a plain assignment in one ``SpeculativeConfig`` method)."""
    found: list[Found] = []
    for cls in classes(module):
        for fn in body_of(cls):
            if not isinstance(fn, cst.FunctionDef):
                continue
            for stmt in body_of(fn):
                name, value = assign_target(stmt)
                if name in ALLOW_LIST_NAMES and value is not None:
                    found.append((cls, fn, stmt, name, value))
    return found


def _strings(value: cst.BaseExpression) -> list[str]:
    if not isinstance(value, cst.List):
        raise PatchShapeError("the EAGLE-3 allow-list is not a list literal")
    out = []
    for element in value.elements:
        if not isinstance(element.value, cst.SimpleString):
            raise PatchShapeError("the EAGLE-3 allow-list holds something other than plain strings")
        out.append(str(element.value.evaluated_value))
    return out


def append_deepseek_kimi(source: str, path: str = SPEC) -> Rewrite:
    """The eagle3-whitelist patch's change: the DeepSeek-V3 family's and Kimi's model types
    appended to the list."""
    module = parse(source, path)
    found = [f for f in _allow_lists(module) if isinstance(f[4], cst.List)]
    if not found:
        raise PatchShapeError(
            f"{path}: no EAGLE-3 allow-list ({' or '.join(ALLOW_LIST_NAMES)} = [...]) found"
        )
    if len(found) > 1:
        raise PatchShapeError(f"{path}: {len(found)} EAGLE-3 allow-lists found, expected one")
    cls, fn, stmt, _, value = found[0]
    assert isinstance(value, cst.List)
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


def _uses(node: cst.CSTNode, name: str) -> bool:
    return bool(find_all(node, lambda n: isinstance(n, cst.Name) and n.value == name))


def _model_type(test: cst.BaseExpression, name: str) -> cst.BaseExpression:
    """The ``<...>.model_type`` expression the refusal's ``any(x in <it> for x in LIST)`` reads."""
    gens = find_all(
        test,
        lambda n: (
            isinstance(n, cst.GeneratorExp) and any(dotted(f.iter) == name for f in [n.for_in])
        ),
    )
    if len(gens) != 1:
        raise PatchShapeError(f"no `any(... for ... in {name})` in the refusal's condition")
    elt = gens[0].elt  # type: ignore[attr-defined]
    if not (isinstance(elt, cst.Comparison) and len(elt.comparisons) == 1):
        raise PatchShapeError("the allow-list test is not `entry in <model_type>`")
    return elt.comparisons[0].comparator


def rewrite(
    source: str,
    path: str = SPEC,
    *,
    family: Family,
    version: str | None = None,
) -> Rewrite:
    """A family's clause: each of its model types admitted exactly (the ``[family]`` table's
    ``model_types``), where the release has the list."""
    if not any(name in source for name in ALLOW_LIST_NAMES):
        return Rewrite(source, changed=False)  # no allow-list in this release: nothing to widen
    module = parse(source, path)
    found = _allow_lists(module)
    if len(found) != 1:
        raise PatchShapeError(f"{path}: {len(found)} EAGLE-3 allow-lists found, expected one")
    cls, fn, _, name, value = found[0]
    try:
        entries = _strings(value)
        refusals = [
            s
            for s in body_of(fn)
            if isinstance(s, cst.If)
            and isinstance(s.test, cst.BooleanOperation)
            and _uses(s.test, name)
        ]
        if len(refusals) != 1:
            raise PatchShapeError(f"expected one `if` that tests {name}, found {len(refusals)}")
        refusal = refusals[0]
        test = refusal.test
        assert isinstance(test, cst.BooleanOperation)
        model_type = _model_type(test, name)
    except PatchShapeError as exc:
        raise PatchShapeError(f"{path}: {exc.message}") from None
    written = cst.Module([]).code_for_node(test)
    wanted = [
        t
        for t in family.model_types
        if not any(entry in t for entry in entries) and f'!= "{t}"' not in written
    ]
    if not wanted:
        return Rewrite(source, changed=False)
    for t in wanted:
        clause = cst.Comparison(
            model_type, [cst.ComparisonTarget(cst.NotEqual(), cst.SimpleString(f'"{t}"'))]
        )
        test = cst.BooleanOperation(
            left=test.with_changes(lpar=[], rpar=[]),
            operator=test.operator,
            right=clause,
            lpar=test.lpar,
            rpar=test.rpar,
        )
    new_fn = replace_in(fn, refusal, refusal.with_changes(test=test))
    return Rewrite(replace_top(module, cls, replace_in(cls, fn, new_fn)).code, changed=True)
