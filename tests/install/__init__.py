"""Tests of locating a vLLM install: venvs, editable and wheel-shaped trees, dist-infos."""
