"""The models a server loads, read from disk without torch: target and drafter configs and the
drafter's safetensors headers (``configs``), the Hugging Face cache lookup (``hub``), and the model
families (``families``)."""
