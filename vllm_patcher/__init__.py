"""vllm-patcher: apply, verify and revert the EAGLE-3 changes for DeepSeek-V3-family targets."""

__version__ = "0.1.0"
