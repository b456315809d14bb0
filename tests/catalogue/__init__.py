"""Tests of the catalogue and release facts."""
