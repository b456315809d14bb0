"""Tests of the libcst codemods."""
