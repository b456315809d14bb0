"""The models a server loads, read from disk without torch: target and drafter configs, the
drafter's safetensors headers, the Hugging Face cache lookup, and the model families."""
