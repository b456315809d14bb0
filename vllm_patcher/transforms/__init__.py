"""The libcst codemods: the EAGLE-3 allow-list (``allow_list``: eagle3-whitelist's entries, and
a family backport's clause), the image token the EAGLE proposer gives a multimodal target's
drafter (``image_token_kimi``: Kimi-K2.5's; ``image_token_qwen3_vl``: Qwen3-VL's),
``supports_eagle3`` (DeepSeek-V2/V3 and Kimi-K2.5), and ``eagle3_family`` on a family backport's
model files (it and the family's allow-list clause driven by the patch's ``[family]`` table);
shared matchers in ``_cst``, and the
import lines and class headers the family codemod extends in ``_headers``: source text in,
source text out, no I/O. ``codemod`` runs the one a patch names (``FileChange``, the catalogue's
data) on a file; ``cache`` keeps their outputs on disk, keyed by the input and the codemods' own
bytes, so a tree the tool has seen skips libcst.

Each transform is idempotent: on source that already carries its change it returns the text
unchanged with ``changed=False``. When the code it expects is not there it raises
``PatchShapeError`` instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rewrite:
    """The result of running one transform over one file."""

    source: str
    changed: bool
