"""Patching an installed vLLM: ``status``, ``apply``, ``revert``, ``verify``.

Read top-down: ``status`` judges each patch's state from file bytes; ``plan`` decides which bytes
each file gets; ``txn`` applies or reverts them as one transaction, recorded by ``journal``;
``verify`` proves the result will load, tier by tier, running ``probe`` (a standalone script) in
the target's interpreter.
"""
