"""Tests of the Ray cluster commands."""
