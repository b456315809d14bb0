"""What the user chose to patch in this environment (``apply NAME...``, ``apply --model``), kept
beside the journal as ``<root>/.vllm-patcher/chosen.json`` so that a later bare ``status``,
``status --check`` and ``verify`` judge that set, the other patches shown as not chosen.

A bare ``apply`` applies the recorded choice (as a bare status and verify judge it); a whole
``revert`` forgets it. The record is a
preference, not a fact about the files: the journal and the bytes stay the truth of what is
applied; a record this run cannot read is said so (exit 7) rather than guessed past.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from .. import fileops
from ..errors import StateError
from . import journal as journal_mod

FILE = "chosen.json"


class Choice(NamedTuple):
    patches: tuple[str, ...]  # in series order
    models: tuple[str, ...] = ()  # the --model arguments that chose them, as given


def path(root: Path) -> Path:
    return journal_mod.state_dir(root) / FILE


def read(root: Path) -> Choice | None:
    """The recorded choice, or None; a record that is not a readable JSON file of patch names is
    a StateError (exit 7), raised before anything is changed (never opened unless a regular
    file: a FIFO there would block)."""
    where = path(root)
    if not os.path.lexists(where):
        return None
    if where.is_symlink() or not where.is_file():
        raise StateError(
            f"the chosen-patches record {where} is not a regular file; remove it to judge every "
            "patch, or run apply NAME... / apply --model DIR again"
        )
    data = fileops.read_or_none(where)
    if data is None:
        return None
    try:
        raw = json.loads(data)
        patches = raw["patches"]
        models = raw.get("models", [])
        if not (
            isinstance(patches, list)
            and patches
            and all(isinstance(p, str) for p in patches)
            and isinstance(models, list)
            and all(isinstance(m, str) for m in models)
        ):
            raise ValueError("patches must be a non-empty list of names")
    except (ValueError, TypeError, KeyError) as exc:
        raise StateError(
            f"the chosen-patches record {where} is unreadable ({exc}); remove it to judge every "
            "patch, or run apply NAME... / apply --model DIR again"
        ) from None
    return Choice(tuple(patches), tuple(models))


def write(root: Path, choice: Choice) -> None:
    fileops.ensure_dir(journal_mod.state_dir(root))
    body = {"patches": list(choice.patches), "models": list(choice.models)}
    fileops.atomic_write(path(root), (json.dumps(body, indent=1) + "\n").encode("utf-8"))


def forget(root: Path) -> None:
    if os.path.lexists(path(root)):
        fileops.remove(path(root))


def check_removable(root: Path) -> None:
    """Before a revert changes anything: the record it will forget is a file (or absent)."""
    where = path(root)
    if os.path.lexists(where) and not (where.is_file() or where.is_symlink()):
        raise StateError(
            f"the chosen-patches record {where} is not a regular file; remove it, then revert"
        )


def merged(earlier: Choice | None, now: Choice, order: dict[str, int]) -> Choice:
    """An apply of more patches adds to the earlier choice (two models served from one venv)."""
    if earlier is None:
        return now
    names = sorted({*earlier.patches, *now.patches}, key=lambda n: order.get(n, len(order)))
    return Choice(tuple(names), tuple(dict.fromkeys((*earlier.models, *now.models))))
