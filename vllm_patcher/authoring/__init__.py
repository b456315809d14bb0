"""Authoring patches: ``capture``, ``import``, ``port`` and the maintainers' ``pin``.

``capture`` turns hand edits in an installed vLLM into a patch folder; ``importing`` starts one
from an upstream diff; ``porting`` carries a patch to other releases by a three-way merge; ``pin``
regenerates the built-ins' pinned diffs from release wheels. The diff text itself is ``diffs``';
what they write into a patch folder goes through ``catalogue.writer``.
"""
