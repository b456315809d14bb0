"""A Hugging Face repo id's snapshot folder in the local cache, offline, found by huggingface_hub
itself (HF_HOME, HF_HUB_CACHE and the rest of its settings included, as ``vllm serve`` finds it).
Run in the vLLM venv's interpreter as ``python hub_snapshot.py REPO_ID``; prints
``{"version", "cache", "path"}``, ``{"error"}`` or ``{"missing"}`` (no huggingface_hub)."""

from __future__ import annotations

import json
import sys


def main(repo_id: str) -> dict[str, str]:
    try:
        import huggingface_hub
        from huggingface_hub import constants, snapshot_download
    except ImportError as exc:
        return {"missing": str(exc)}
    out = {"version": huggingface_hub.__version__, "cache": str(constants.HF_HUB_CACHE)}
    try:
        out["path"] = snapshot_download(repo_id, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - what the hub said is the answer
        first = str(exc).splitlines()[0] if str(exc) else ""
        out["error"] = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
