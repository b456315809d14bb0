"""Tests of the wheel index and fetching."""
