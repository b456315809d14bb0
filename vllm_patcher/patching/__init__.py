"""Patching an installed vLLM: ``status``, ``apply``, ``revert``, ``verify``.

Read top-down: ``states`` says what a status is; ``survey`` judges each touched file from its
bytes and ``status`` turns that into each patch's state; ``plan`` decides which bytes each file
gets; ``txn`` applies or reverts them as one transaction (``files`` writes safely, ``commit``
moves the ``journal`` through its phases, ``recovery`` brings back what an interrupted run
left); ``chosen`` keeps which patches the user chose for this environment; ``verify`` proves the result will load, tier by tier, running ``probe`` (a standalone
script) in the target's interpreter.
"""
