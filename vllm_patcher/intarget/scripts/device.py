"""The device vLLM would run on, as vLLM itself detects it (``vllm.platforms.current_platform``):
one JSON line ``{"device_type": ..., "platform": ...}``; ``device_type`` is empty when vLLM finds
none it can run on (a CUDA build on a host without a GPU: vLLM's UnspecifiedPlatform, which the
engine later refuses with "Failed to infer device type")."""

import json


def main() -> None:
    from vllm.platforms import current_platform  # the target's vLLM, imported only when run

    answer = {
        "device_type": str(getattr(current_platform, "device_type", "") or ""),
        "platform": type(current_platform).__name__,
    }
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
