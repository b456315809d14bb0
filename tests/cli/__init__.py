"""Tests of the command line: options, progress."""
