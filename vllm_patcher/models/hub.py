"""Where a model is: a directory, or a Hugging Face repo id looked up in the local cache by the
huggingface_hub of the interpreter that will serve it."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import ModelFilesError
from ..intarget import scripts
from ..runtime import ScriptNotRun, environ, run_script

# huggingface_hub's own rule for a repo id (``validate_repo_id``): ``name`` or ``org/name``.
REPO_ID = re.compile(r"(?!.*(--|\.\.))[\w\-.]{1,96}(/[\w\-.]{1,96})?")


# ``hf download`` arrived in huggingface_hub 0.34; older ones have ``huggingface-cli download``.
HF_CLI_FROM = Version("0.34.0")


@dataclass(frozen=True)
class ModelSource:
    """Where a --model or --drafter argument was found: a directory, or a Hugging Face repo id
    resolved in the local cache (``path`` is then its snapshot folder)."""

    given: str
    path: str
    repo_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"given": self.given, "path": self.path, "repo_id": self.repo_id}


# Run inside the chosen interpreter (the vLLM venv's, which has huggingface_hub because vLLM
# needs it): the cache is found and read by huggingface_hub itself, as ``vllm serve`` does
# (HF_HOME, HF_HUB_CACHE and the rest of its settings included), offline.


def is_repo_id(name: str) -> bool:
    """Whether ``name`` can be a Hugging Face repo id (``org/name`` or ``name``).

    Only asked when ``name`` is not an existing directory: an existing directory wins, as it does
    for vLLM and transformers (``from_pretrained`` looks on disk first).
    """
    return REPO_ID.fullmatch(name) is not None and not name.startswith((".", "-"))


def download_command(repo_id: str, role: str, hub_version: str | None) -> str:
    """The command that puts what doctor reads into the cache (the target's config.json only:
    doctor needs nothing else from a checkpoint that may weigh hundreds of GB)."""
    try:
        new_cli = hub_version is None or Version(hub_version) >= HF_CLI_FROM
    except InvalidVersion:
        new_cli = True
    cli = "hf download" if new_cli else "huggingface-cli download"
    if role == "model":
        return f"{cli} {repo_id} --include config.json"
    return f"{cli} {repo_id}"


def locate_model(given: str | Path, role: str, python: Callable[[], str] | None) -> ModelSource:
    """The directory to read for a --model or --drafter argument.

    An existing directory is taken as it is; otherwise a name shaped like a repo id is looked up
    in the local Hugging Face cache through ``python``'s huggingface_hub, offline (exit 11 with
    the download command when it is not there).
    """
    name = str(given)
    if Path(name).is_dir() or not is_repo_id(name):
        return ModelSource(given=name, path=name)
    exe = python() if python is not None else sys.executable
    try:
        proc = run_script(
            exe,
            [str(scripts.path("hub_snapshot")), name],
            timeout=120,
            isolated=False,  # huggingface_hub reads HF_HOME and friends from the environment
            env=environ(HF_HUB_OFFLINE="1"),
        )
    except ScriptNotRun as exc:
        raise ModelFilesError(f"cannot ask {exe} where {name} is cached: {exc.cause}") from None
    answer = proc.answer
    if answer is None:
        tail = proc.stderr_tail("no answer")
        raise ModelFilesError(f"cannot ask {exe} where {name} is cached: {tail}")
    if "missing" in answer:
        raise ModelFilesError(
            f"{role} {name} is not a directory, and {exe} has no huggingface_hub to look it up as "
            "a Hugging Face repo id: pass --python with the vLLM venv (it has huggingface_hub) "
            "or install vllm-patcher[hf]"
        )
    if "path" not in answer:
        raise ModelFilesError(
            f"{role} {name} is not a directory, and the Hugging Face repo {name} is not in the "
            f"local cache {answer.get('cache')} (read offline); download it with: "
            f"{download_command(name, role, answer.get('version'))}"
        )
    return ModelSource(given=name, path=str(answer["path"]), repo_id=name)
