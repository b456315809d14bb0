"""The models a server loads, read from disk without torch: target and drafter configs and the
drafter's safetensors headers (``configs``), the Hugging Face cache lookup (``hub``), and the roles
a config plays, target or drafter, and the three families doctor keeps rules for (``roles``)."""
