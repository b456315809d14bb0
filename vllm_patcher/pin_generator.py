"""Maintainer side of pinned diffs: produce ``patches/vllm-<version>/`` from a release's wheel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import catalog, pinned, sources
from .catalog import Release
from .errors import LocallyModified
from .target import file_hash, locate_in_directory


@dataclass
class PinResult:
    version: str
    outcome: str  # written | unchanged | upstream
    files: list[str] = field(default_factory=list)


def pin_release(
    version: str, root: Path, progress: Callable[[str], None] | None = None
) -> PinResult:
    tree = sources.fetch_release(version, progress=progress)
    target = locate_in_directory(str(tree))
    if catalog.classify(target.version) is Release.UPSTREAM:
        return PinResult(version, "upstream")
    entries = []
    for patch in catalog.PATCHES:
        for change in patch.applicable(target.record):
            data = target.path(change.path).read_bytes()
            if file_hash(data) != target.record.get(change.path):
                raise LocallyModified(
                    f"{target.path(change.path)} differs from its wheel's RECORD; delete {tree} and pin again"
                )
            before = data.decode("utf-8")
            result = change.rewrite(before)
            if result.changed:
                entries.append(
                    (
                        change.path,
                        patch.name,
                        file_hash(data),
                        file_hash(result.source.encode("utf-8")),
                        before,
                        result.source,
                    )
                )
    changed = pinned.write_release(root / f"vllm-{version}", version, entries)
    return PinResult(version, "written" if changed else "unchanged", [e[0] for e in entries])
