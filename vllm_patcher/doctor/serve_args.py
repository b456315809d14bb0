"""serve-args: the JSON for vllm serve --speculative-config, from the drafter doctor checked."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ModelFilesError
from ..models.hub import ModelSource


def speculative_config(
    drafter: str | Path | ModelSource, num_speculative_tokens: int = 3
) -> dict[str, object]:
    """vLLM's ``--speculative-config`` for this drafter (a directory, or a cached repo id, which
    is passed on as its id so vLLM resolves it the same way)."""
    if isinstance(drafter, ModelSource):
        source = drafter
    else:
        source = ModelSource(given=str(drafter), path=str(drafter))
    root = Path(source.path)
    if not (root / "config.json").is_file():
        raise ModelFilesError(f"drafter directory {root} has no config.json")
    return {
        "method": "eagle3",
        # not resolve(): keep the operator's symlinked model paths as they named them
        "model": source.repo_id or os.path.abspath(root),
        "num_speculative_tokens": num_speculative_tokens,
    }
