"""A family's allow-list entry: ``SpeculativeConfig`` admits its model types for EAGLE-3, exactly.

Through 0.21.x ``SpeculativeConfig`` refuses ``eagle3`` unless the target's text model type
contains one of the allow-list's strings. Appending ``"granite"`` to that list would also admit
``granitemoe`` (whose model has no EAGLE-3 support), so a family's entry is one more clause of
the refusal's condition instead, ``and <model_type> != "granite"`` for each of its model types:
the type itself is admitted and nothing else. A type the list already admits gets no clause; a
release without the list (0.22.0 on) is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import assign_target, body_of, classes, dotted, find_all, parse, replace_top
from ._cst import replace_statement as replace_in
from .whitelist import ALLOW_LIST_NAMES

if TYPE_CHECKING:
    from ..catalogue.family import Family


def _entries(value: cst.BaseExpression) -> list[str]:
    if not isinstance(value, cst.List):
        raise PatchShapeError("the EAGLE-3 allow-list is not a list literal")
    out = []
    for element in value.elements:
        if not isinstance(element.value, cst.SimpleString):
            raise PatchShapeError("the EAGLE-3 allow-list holds something other than plain strings")
        out.append(str(element.value.evaluated_value))
    return out


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
    path: str = "vllm/config/speculative.py",
    *,
    family: Family,
    version: str | None = None,
) -> Rewrite:
    if not any(name in source for name in ALLOW_LIST_NAMES):
        return Rewrite(source, changed=False)  # no allow-list in this release: nothing to widen
    module = parse(source, path)
    found = []
    for cls in classes(module):
        for fn in body_of(cls):
            if not isinstance(fn, cst.FunctionDef):
                continue
            for stmt in body_of(fn):
                name, value = assign_target(stmt)
                if name in ALLOW_LIST_NAMES and value is not None:
                    found.append((cls, fn, name, value))
    if len(found) != 1:
        raise PatchShapeError(f"{path}: {len(found)} EAGLE-3 allow-lists found, expected one")
    cls, fn, name, value = found[0]
    try:
        entries = _entries(value)
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
