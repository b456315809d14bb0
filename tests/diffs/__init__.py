"""Tests of exact, fuzzy and three-way diffs."""
