"""The device vLLM would run on, as vLLM itself detects it (``vllm.platforms.current_platform``):
one JSON line ``{"device_type": ..., "platform": ...}``; ``device_type`` is empty when vLLM finds
none it can run on (a CUDA build on a host without a GPU: vLLM's UnspecifiedPlatform, which the
engine later refuses with "Failed to infer device type")."""

import json

from vllm.platforms import current_platform

print(
    json.dumps(
        {
            "device_type": str(getattr(current_platform, "device_type", "") or ""),
            "platform": type(current_platform).__name__,
        }
    )
)
