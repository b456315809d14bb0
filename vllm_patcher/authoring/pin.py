"""Maintainer side of the built-ins' pinned diffs: run each codemod over a release's pristine
files, in series order, and write ``NAME/vllm-<version>/`` for every patch that changed something.
Patches without a codemod (made by capture, import or port) are left as they are."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..catalogue import support
from ..catalogue.layout import Verdict, layout
from ..catalogue.model import Catalogue
from ..catalogue.writer import write_pin
from ..errors import LocallyModified
from ..events import FetchEvent
from ..install.locate import locate_in_directory
from ..install.record import file_hash
from ..transforms import codemod
from ..wheels import sources


@dataclass
class PinResult:
    version: str
    outcome: str  # written | unchanged | upstream
    files: list[str] = field(default_factory=list)


def pin_release(
    version: str,
    catalogue: Catalogue,
    root: Path,
    say: Callable[[FetchEvent], None] | None = None,
    wheels: Mapping[str, Path] | None = None,
) -> PinResult:
    tree = sources.fetch_release(version, catalogue.all_paths(), say=say, wheels=wheels)
    target = locate_in_directory(str(tree), catalogue)
    support.classify(catalogue, target.version)
    coded = [p for p in catalogue.patches if p.transforms]
    lay = layout(Catalogue(tuple(coded)), target.version, target.record)
    if all(v is not Verdict.APPLICABLE for v in lay.verdicts.values()):
        return PinResult(version, "upstream")
    running: dict[str, str] = {}
    for rel in {
        c.path for p in coded for c in p.applicable_transforms(target.record, target.version)
    }:
        data = target.path(rel).read_bytes()
        if file_hash(data) != target.record.get(rel):
            raise LocallyModified(
                f"{target.path(rel)} differs from its wheel's RECORD; delete {tree} and pin again"
            )
        running[rel] = data.decode("utf-8")
    touched: list[str] = []
    changed = False
    for patch in coded:
        if lay.verdicts.get(patch.name) is not Verdict.APPLICABLE:
            continue
        entries = []
        for change in patch.applicable_transforms(target.record, target.version):
            before = running[change.path]
            result = codemod.rewrite(change, before, target.version)
            if result.changed:
                entries.append((change.path, before, result.source))
                running[change.path] = result.source
                touched.append(change.path)
        if entries:
            folder = root / patch.name / f"vllm-{version}"
            changed |= write_pin(folder, version, patch.name, entries)
    return PinResult(version, "written" if changed else "unchanged", sorted(set(touched)))
