"""kimi-k25-image-token: read Kimi-K2.5's image token from ``media_placeholder_token_id``.

When the target is multimodal, the EAGLE proposer's ``load_model`` copies the target's image token
id into the drafter's config. Its fallback branch reads ``target_model.config.image_token_index``,
which Kimi-K2.5's config does not have, so loading fails with AttributeError. This adds, just
before that fallback, a branch for ``KimiK25ForConditionalGeneration`` that reads
``media_placeholder_token_id`` (upstream 0.18.0 has the same branch).
"""

from __future__ import annotations

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import (
    assign_target,
    body_of,
    classes,
    dotted,
    method,
    parse,
    replace_statement,
    replace_top,
)

PATCH = "kimi-k25-image-token"
KIMI_ARCH = "KimiK25ForConditionalGeneration"
FALLBACK = ("self.model.config.image_token_index", "target_model.config.image_token_index")

_TEMPLATE = f'''\
if self.get_model_name(target_model) == "{KIMI_ARCH}":
    self.model.config.image_token_index = (
        target_model.config.media_placeholder_token_id
    )
'''


def _is_fallback(orelse: object) -> bool:
    if not isinstance(orelse, cst.Else):
        return False
    stmts = body_of(orelse)
    if len(stmts) != 1:
        return False
    target, value = assign_target(stmts[0])
    return (target, dotted(value)) == FALLBACK


def _is_kimi_test(test: cst.BaseExpression) -> bool:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    comp = test.comparisons[0]
    return (
        isinstance(comp.operator, cst.Equal)
        and isinstance(comp.comparator, cst.SimpleString)
        and comp.comparator.evaluated_value == KIMI_ARCH
    )


def _chain(node: cst.If) -> list[cst.If]:
    out = [node]
    while isinstance(out[-1].orelse, cst.If):
        out.append(out[-1].orelse)
    return out


def _insert_kimi(node: cst.If) -> cst.If:
    if isinstance(node.orelse, cst.If):
        return node.with_changes(orelse=_insert_kimi(node.orelse))
    branch = cst.parse_statement(_TEMPLATE)
    assert isinstance(branch, cst.If) and isinstance(branch.test, cst.Comparison)
    # Name the model the same way the neighbouring branch does.
    if isinstance(node.test, cst.Comparison):
        branch = branch.with_changes(test=branch.test.with_changes(left=node.test.left))
    return node.with_changes(orelse=branch.with_changes(orelse=node.orelse))


Branch = tuple[cst.ClassDef, cst.FunctionDef, cst.If]


def multimodal_branches(module: cst.Module) -> list[Branch]:
    """(class, its load_model, the branch) of each ``if supports_multimodal(target_model):`` in
    a proposer's ``load_model``: where the drafter gets the target's image token (this codemod
    and ``image_token_qwen3_vl`` both rewrite it)."""
    found = []
    for cls in classes(module):
        fn = method(cls, "load_model")
        if fn is None:
            continue
        for outer in body_of(fn):
            if (
                isinstance(outer, cst.If)
                and isinstance(outer.test, cst.Call)
                and dotted(outer.test.func) == "supports_multimodal"
            ):
                found.append((cls, fn, outer))
    return found


def with_branch(module: cst.Module, found: Branch, new_outer: cst.If) -> str:
    """The module's code with the branch ``found`` replaced by ``new_outer``."""
    cls, fn, outer = found
    new_cls = replace_statement(cls, fn, replace_statement(fn, outer, new_outer))
    return replace_top(module, cls, new_cls).code


def rewrite(source: str, path: str = "vllm/v1/spec_decode/eagle.py") -> Rewrite:
    module = parse(source, path)
    # load_model: `if supports_multimodal(target_model):` holds an if/elif chain over model
    # names whose final `else` is the generic image_token_index fallback.
    found = []
    for cls, fn, outer in multimodal_branches(module):
        for chain in body_of(outer):
            if isinstance(chain, cst.If) and _is_fallback(_chain(chain)[-1].orelse):
                found.append((cls, fn, outer, chain))
    if not found:
        raise PatchShapeError(
            f"{path}: no image-token fallback in load_model "
            "(else: self.model.config.image_token_index = target_model.config.image_token_index)"
        )
    if len(found) > 1:
        raise PatchShapeError(f"{path}: {len(found)} image-token fallbacks found, expected one")
    cls, fn, outer, chain = found[0]
    if any(_is_kimi_test(branch.test) for branch in _chain(chain)):
        return Rewrite(source, changed=False)
    new_outer = replace_statement(outer, chain, _insert_kimi(chain))
    return Rewrite(with_branch(module, (cls, fn, outer), new_outer), changed=True)
