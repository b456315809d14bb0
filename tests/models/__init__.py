"""Tests of reading model configs, safetensors headers and the Hugging Face cache."""
