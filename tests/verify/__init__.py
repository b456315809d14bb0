"""Tests of verify's behaviour checks."""
