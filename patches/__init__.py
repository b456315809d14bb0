"""Version-pinned diffs, one folder per vLLM release (installed as ``vllm_patcher.patches``)."""
