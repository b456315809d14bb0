"""eagle3-qwen3-vl's transform: the EAGLE proposer reads Qwen3-VL's image token from
``image_token_id``.

When the target is multimodal, the proposer's ``load_model`` copies the target's image token id
into the drafter's config. Qwen3-VL's config (and Qwen3-VL-MoE's) has ``image_token_id``, not the
``image_token_index`` of the fallback branch, so loading an EAGLE-3 drafter for either fails with
AttributeError until upstream names them: ``Qwen3VLForConditionalGeneration`` in 0.12.0,
``Qwen3VLMoeForConditionalGeneration`` in 0.15.0 (beside ``Qwen2_5_VLForConditionalGeneration``,
0.11.1). Three shapes, rewritten the way the release after them reads:

* 0.12.0-0.14.1: ``if self.get_model_name(target_model) in [...]:`` reading ``image_token_id``:
  the missing names are added to its list.
* 0.11.1-0.11.2: ``if self.get_model_name(target_model) == "Qwen2_5_VL...":``: the test becomes
  ``in [...]`` with the two Qwen3-VL names.
* 0.11.0 (no branch at all, no ``get_model_name``): the one assignment becomes a branch on the
  target's class name, the release's assignment kept as its ``else``.
"""

from __future__ import annotations

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import (
    assign_target,
    body_of,
    dotted,
    parse,
    replace_statement,
)
from .image_token_kimi import multimodal_branches, with_branch

NAMES = ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration")
TARGET = "self.model.config.image_token_index"
BY_ID = "target_model.config.image_token_id"
BY_INDEX = "target_model.config.image_token_index"


def _list_text(names: list[str]) -> str:
    return "[\n" + "".join(f'    "{n}",\n' for n in names) + "]"


def _by_id_branch(chain: cst.If) -> cst.If | None:
    """The branch of the if/elif chain whose body reads ``image_token_id``."""
    node: cst.BaseSuite | cst.If | cst.Else | None = chain
    while isinstance(node, cst.If):
        stmts = body_of(node)
        if len(stmts) == 1 and (assign_target(stmts[0])[0], dotted(assign_target(stmts[0])[1])) == (
            TARGET,
            BY_ID,
        ):
            return node
        node = node.orelse
    return None


def _named(test: cst.BaseExpression) -> tuple[str, list[str]] | None:
    """(the model-name expression, the names it admits) of ``X == "A"`` or ``X in ["A", ...]``."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    comp = test.comparisons[0]
    left = cst.Module([]).code_for_node(test.left)
    if isinstance(comp.operator, cst.Equal) and isinstance(comp.comparator, cst.SimpleString):
        return left, [str(comp.comparator.evaluated_value)]
    if isinstance(comp.operator, cst.In) and isinstance(comp.comparator, cst.List):
        names = [e.value.evaluated_value for e in comp.comparator.elements
                 if isinstance(e.value, cst.SimpleString)]  # fmt: skip
        if len(names) == len(comp.comparator.elements):
            return left, [str(n) for n in names]
    return None


def _widened(branch: cst.If) -> cst.If | None:
    """The branch with both Qwen3-VL names admitted (None: already)."""
    named = _named(branch.test)
    if named is None:
        raise PatchShapeError("the image_token_id branch does not test the model's name")
    left, names = named
    missing = [n for n in NAMES if n not in names]
    if not missing:
        return None
    test = cst.parse_expression(f"{left} in {_list_text([*names, *missing])}")
    return branch.with_changes(test=test)


def _replace_branch(chain: cst.If, old: cst.If, new: cst.If) -> cst.If:
    if chain is old:
        return new
    assert isinstance(chain.orelse, cst.If)
    return chain.with_changes(orelse=_replace_branch(chain.orelse, old, new))


def _new_chain(assign: cst.SimpleStatementLine) -> cst.If:
    """0.11.0's lone fallback assignment, behind a branch for the Qwen3-VL classes."""
    text = (
        f"if type(target_model).__name__ in {_list_text(list(NAMES))}:\n"
        f"    {TARGET} = {BY_ID}\n"
        "else:\n"
        "    pass\n"
    )
    shell = cst.parse_statement(text)
    assert isinstance(shell, cst.If) and isinstance(shell.orelse, cst.Else)
    orelse = shell.orelse.with_changes(
        body=shell.orelse.body.with_changes(body=[assign.with_changes(leading_lines=[])])
    )
    return shell.with_changes(orelse=orelse, leading_lines=assign.leading_lines)


def _rewrite_body(outer: cst.If) -> cst.If | None:
    """The ``if supports_multimodal(target_model):`` block rewritten (None: nothing to do)."""
    for stmt in body_of(outer):
        if isinstance(stmt, cst.If):
            branch = _by_id_branch(stmt)
            if branch is None:
                continue
            widened = _widened(branch)
            if widened is None:
                return None
            return replace_statement(outer, stmt, _replace_branch(stmt, branch, widened))
        target, value = assign_target(stmt)
        if (target, dotted(value)) == (TARGET, BY_INDEX) and isinstance(
            stmt, cst.SimpleStatementLine
        ):
            return replace_statement(outer, stmt, _new_chain(stmt))
    raise PatchShapeError(
        "no image-token assignment in load_model's multimodal branch "
        f"({TARGET} = {BY_INDEX}, or a branch reading image_token_id)"
    )


def rewrite(source: str, path: str = "vllm/v1/spec_decode/eagle.py") -> Rewrite:
    module = parse(source, path)
    found = multimodal_branches(module)
    if len(found) != 1:
        raise PatchShapeError(
            f"{path}: expected one `if supports_multimodal(target_model):` in load_model, "
            f"found {len(found)}"
        )
    outer = found[0][2]
    try:
        new_outer = _rewrite_body(outer)
    except PatchShapeError as exc:
        raise PatchShapeError(f"{path}: {exc.message}") from None
    if new_outer is None:
        return Rewrite(source, changed=False)
    return Rewrite(with_branch(module, found[0], new_outer), changed=True)
