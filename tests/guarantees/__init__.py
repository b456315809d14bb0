"""Tests of the README's Guarantees: crash safety, hostile and bad input, trust, reads, the JSON envelope."""
