"""kimi-k25-image-token: read Kimi-K2.5's image token from ``media_placeholder_token_id``.

When the target is multimodal, the EAGLE proposer's ``load_model`` copies the target's image token
id into the drafter's config. Its fallback branch reads ``target_model.config.image_token_index``,
which Kimi-K2.5's config does not have, so loading fails with AttributeError. This adds, just
before that fallback, a branch for ``KimiK25ForConditionalGeneration`` that reads
``media_placeholder_token_id`` (upstream 0.18.0 has the same branch).
"""

from __future__ import annotations

from typing import Any

import libcst as cst
import libcst.matchers as m

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import parse

PATCH = "kimi-k25-image-token"
KIMI_ARCH = "KimiK25ForConditionalGeneration"


def _attr_chain(*names: str) -> Any:
    node: Any = m.Name(names[0])
    for name in names[1:]:
        node = m.Attribute(value=node, attr=m.Name(name))
    return node


_FALLBACK_ASSIGN = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[
                m.AssignTarget(target=_attr_chain("self", "model", "config", "image_token_index"))
            ],
            value=_attr_chain("target_model", "config", "image_token_index"),
        )
    ]
)
_LAST_BRANCH = m.If(orelse=m.Else(body=m.IndentedBlock(body=[_FALLBACK_ASSIGN])))
_KIMI_TEST = m.Comparison(
    comparisons=[
        m.ComparisonTarget(
            operator=m.Equal(),
            comparator=m.SimpleString(m.MatchIfTrue(lambda raw: raw.strip("\"'") == KIMI_ARCH)),
        )
    ]
)

_TEMPLATE = f'''\
if self.get_model_name(target_model) == "{KIMI_ARCH}":
    self.model.config.image_token_index = (
        target_model.config.media_placeholder_token_id
    )
'''


class _KimiBranchInserter(m.MatcherDecoratableTransformer):
    def __init__(self) -> None:
        super().__init__()
        self.found = 0

    @m.leave(_LAST_BRANCH)
    def insert(self, original: cst.If, updated: cst.If) -> cst.If:
        self.found += 1
        branch = cst.parse_statement(_TEMPLATE)
        assert isinstance(branch, cst.If)
        # Name the model the same way the neighbouring branch does.
        test = updated.test
        if isinstance(test, cst.Comparison) and isinstance(branch.test, cst.Comparison):
            branch = branch.with_changes(test=branch.test.with_changes(left=test.left))
        return updated.with_changes(orelse=branch.with_changes(orelse=updated.orelse))


def rewrite(source: str, path: str = "vllm/v1/spec_decode/eagle.py") -> Rewrite:
    module = parse(source, path)
    if m.findall(module, m.If(test=_KIMI_TEST)):
        return Rewrite(source, changed=False)
    inserter = _KimiBranchInserter()
    new = module.visit(inserter)
    if inserter.found == 0:
        raise PatchShapeError(
            f"{path}: no image-token fallback "
            "(else: self.model.config.image_token_index = target_model.config.image_token_index)"
        )
    if inserter.found > 1:
        raise PatchShapeError(f"{path}: {inserter.found} image-token fallbacks found, expected one")
    return Rewrite(new.code, changed=True)
