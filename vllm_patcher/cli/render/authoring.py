"""What capture, port, import and pin show, as text and as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...catalogue.model import CONFLICTS, Patch
from ...errors import EXIT_OK
from .. import outcomes
from ..base import Shown

if TYPE_CHECKING:  # typing only: each command loads its own machinery
    from ...authoring.capture import CaptureResult
    from ...authoring.importing import ImportResult
    from ...authoring.pin import PinResult
    from ...authoring.porting import PortResult


def capture(result: CaptureResult, name: str, revert_command: str) -> Shown:
    verb = "replaced" if result.replaced else "wrote"
    return Shown(
        EXIT_OK,
        result.to_dict(),
        [
            f"{verb} {result.folder / ('vllm-' + result.version)} ({', '.join(result.files)})",
            f"{name} is recorded as applied on vLLM {result.version}; "
            f"`{revert_command}` takes it out, with every other patch applied there",
        ],
    )


def port(result: PortResult, patch: Patch, conflicted: list[str], refusal: str | None) -> Shown:
    """``conflicted``: the releases left with conflict markers; ``refusal``: what --continue
    could not carry (said in both modes)."""
    lines = []
    for r in result.releases:
        extra = f" ({', '.join(r.files)})" if r.files else ""
        where = f" -> {r.folder}" if r.folder else ""
        lines.append(f"  vllm {r.version:<10} {r.outcome}{extra}{where}")
    lines += [f"note: {note}" for note in result.notes]
    if conflicted:
        to = " ".join(f"--to {version}" for version in conflicted)
        lines.append(
            f"resolve the markers in {patch.folder / CONFLICTS}, then run "
            f"`vllm-patcher {patch.args(f'port {patch.name} {to} --continue')}`"
        )
    code = outcomes.found("port", "written" if result.ok else "conflicts")
    errors = [f"vllm-patcher: error: {refusal}"] if refusal else []
    return Shown(code, result.to_dict(), lines, stderr=errors)


def import_(result: ImportResult, apply_command: str) -> Shown:
    lines = [f"  {rel:<50} {how}" for rel, how in result.files.items()]
    lines += [f"  {rel:<50} dropped (outside vllm/)" for rel in result.dropped]
    lines += [f"note: {note}" for note in result.notes]
    if result.written:
        lines.append(
            f"wrote {result.folder / ('vllm-' + result.version)}; `{apply_command}` patches vLLM "
            "with it"
        )
    code = outcomes.found("import", "written" if result.written else "conflicts")
    return Shown(code, result.to_dict(), lines)


def pin(results: list[PinResult], root: Path) -> Shown:
    return Shown(
        EXIT_OK,
        {"patches_dir": str(root), "releases": [r.__dict__ for r in results]},
        [
            f"vllm {r.version}: {r.outcome}" + (f" ({', '.join(r.files)})" if r.files else "")
            for r in results
        ],
    )
