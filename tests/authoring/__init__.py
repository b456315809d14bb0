"""Tests of capture, import, port."""
