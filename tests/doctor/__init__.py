"""Tests of doctor and serve-args."""
