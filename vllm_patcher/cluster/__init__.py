"""``cluster``: status, apply or verify on every node of a Ray cluster. ``nodes`` runs on the
tool's side and on each node; ``driver`` is the standalone Ray script run in the target's
interpreter."""
