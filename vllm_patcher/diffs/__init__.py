"""Diff text, no target I/O: ``pinned`` makes, splits and applies a release's exact diff and
writes its folder; ``merge`` splits, fuzzily applies and three-way merges (import and port)."""
