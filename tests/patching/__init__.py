"""Tests of status, plan, the transaction (apply, revert), the journal and verify."""
