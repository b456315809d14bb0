"""Diff text, no target I/O: ``text`` (lines, conflict markers, unified diffs parsed and
written), ``pinned`` (a release's exact diff: made, split, applied), ``upstream`` (a multi-file
diff split per file, for import), ``fuzzy`` (GNU patch's fuzzy apply, for import) and ``merge``
(the three-way merge, for port)."""
