"""One libcst codemod per patch (``whitelist``, ``image_token``, ``supports_eagle3``,
``vl_image_token``: Qwen3-VL's image token in the EAGLE proposer), and one
for every family backport (``eagle3_family`` on its model files, ``allow_list`` on the EAGLE-3
allow-list, both driven by the patch's ``[family]`` table); shared matchers in ``_cst``, and the
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
