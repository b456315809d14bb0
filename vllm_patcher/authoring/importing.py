"""``import NAME --diff FILE``: start a patch from an upstream change (a PR's ``.diff``, a
``git diff`` between tags).

The diff's hunks are applied, with context matching and bounded fuzz, to the installed release's
pristine files as the patches before NAME in the series leave them; the result becomes NAME's diff
and manifest for that release. Files outside ``vllm/`` (tests, docs) are dropped with a note.
Hunks that do not apply leave a ``.rej`` and a conflict-marked copy of the file under
``NAME/conflicts/vllm-VERSION/``; after fixing the copy, ``import NAME --continue`` finishes.
Nothing in site-packages is touched: ``apply`` does that. NAME goes where capture puts it (see
capture.py), and is refused the same way when it would replay before a patch it is stacked on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import fileops
from ..catalogue.folders import patches_args
from ..catalogue.layout import builds_on, layout
from ..catalogue.model import CONFLICTS, Catalogue
from ..catalogue.writer import add_to_series, write_patch_toml, write_pin
from ..diffs.fuzzy import apply_fuzzy
from ..diffs.upstream import split_upstream_diff
from ..errors import BadSetting, PatchFolderError, PortConflict
from ..install.target import Target
from ..releases import public_version
from .capture import destination, refuse_out_of_order
from .porting import (
    base_bytes,
    drop_if_done,
    refuse_markers,
    resolved_files,
    tree_target,
    write_pending,
)


@dataclass
class ImportResult:
    name: str
    version: str
    folder: Path
    written: bool
    files: dict[str, str] = field(default_factory=dict)  # rel -> clean | N hunks rejected | absent
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stacked_on: list[str] = field(default_factory=list)  # the patches its diff is made on top of

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "vllm_version": self.version,
            "folder": str(self.folder),
            "written": self.written,
            "files": self.files,
            "dropped": self.dropped,
            "notes": self.notes,
        }


def _pending(folder: Path, name: str, version: str) -> Path:
    return folder / name / CONFLICTS / f"vllm-{version}"


def import_diff(
    target: Target,
    catalogue: Catalogue,
    folders: Sequence[Path],
    name: str,
    diff_text: str,
    source: str,
    releases: str | None = None,
    summary: str | None = None,
    max_fuzz: int = 2,
    wheels: Mapping[str, Path] | None = None,
) -> ImportResult:
    folder = destination(catalogue, folders, name)
    version = target.version
    per_file, dropped = split_upstream_diff(diff_text)
    result = ImportResult(name, version, folder / name, False, dropped=dropped)
    if not per_file:
        raise PatchFolderError(f"{source} changes no file under vllm/; nothing to import")
    # NAME goes after every patch the catalogue has, so its base is what they all leave
    ordered = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    tree = tree_target(public_version(version), sorted(per_file), catalogue, wheels)
    outcomes: dict[str, tuple[str, str, str, str]] = {}  # rel -> (base, text, conflict, rejects)
    for rel, file_diff in per_file.items():
        if rel not in tree.record:
            result.files[rel] = "absent"
            continue
        base = base_bytes(ordered, "", tree, rel, tree.path(rel).read_bytes()).decode("utf-8")
        fuzzed = apply_fuzzy(
            base, file_diff, max_fuzz=max_fuzz, ours_label=f"vllm {version}", theirs_label=source
        )
        rejected = len(fuzzed.rejected)
        result.files[rel] = f"{rejected} hunk(s) rejected" if rejected else "clean"
        outcomes[rel] = (base, fuzzed.text, fuzzed.conflict_text, fuzzed.rejects)
    absent = [rel for rel, how in result.files.items() if how == "absent"]
    if absent:
        result.notes.append(f"not in vLLM {version}, left out: {', '.join(absent)}")
    if not outcomes:
        raise PatchFolderError(f"none of the files {source} changes exists in vLLM {version}")
    result.stacked_on = _refuse_out_of_order(catalogue, folders, folder, name, tree, outcomes)
    conflicted = any(rej for *_, rej in outcomes.values())
    files = [(rel, base, text) for rel, (base, text, _, _) in outcomes.items() if base != text]
    if not conflicted and not files:
        raise PatchFolderError(f"{source} is already in vLLM {version}; nothing to import")
    write_patch_toml(folder / name, name, version, releases, summary or f"imported from {source}")
    add_to_series(folder, name)
    pending = _pending(folder, name, version)
    fileops.remove_tree(pending)
    if conflicted:
        write_pending(
            pending,
            {rel: conflict if rej else text for rel, (_, text, conflict, rej) in outcomes.items()},
        )
        for rel, (*_, rejects) in outcomes.items():
            if rejects:
                out = pending / rel
                fileops.write_patch_text(out.with_name(out.name + ".rej"), rejects)
        again = target.command(f"{patches_args(folders)} import {name} --continue")
        result.notes.append(
            f"fix the conflict-marked files under {pending} (the .rej files hold the hunks that "
            f"did not apply), then run `{again}`"
        )
        return result
    write_pin(folder / name / f"vllm-{version}", version, name, files)
    result.written = True
    return result


def continue_import(
    target: Target,
    catalogue: Catalogue,
    folders: Sequence[Path],
    name: str,
    wheels: Mapping[str, Path] | None = None,
) -> ImportResult:
    folder = destination(catalogue, folders, name)
    version = target.version
    pending = _pending(folder, name, version)
    if not pending.is_dir():
        first = target.command(f"{patches_args(folders)} import {name} --diff FILE")
        raise BadSetting(
            f"no import of {name} is waiting for vLLM {version} ({pending} is absent); "
            f"run `{first}` first"
        )
    again = target.command(f"{patches_args(folders)} import {name} --continue")
    fixed = resolved_files(pending, again, target.record)
    refuse_markers(pending, fixed, again)
    ordered = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    tree = tree_target(public_version(version), sorted(fixed), catalogue, wheels)
    files = []
    result = ImportResult(name, version, folder / name, True)
    outcomes = {}
    for rel, text in fixed.items():
        base = base_bytes(ordered, "", tree, rel, tree.path(rel).read_bytes()).decode("utf-8")
        outcomes[rel] = (base, text, "", "")
        if text != base:
            files.append((rel, base, text))
            result.files[rel] = "resolved"
    if not files:
        raise PortConflict(f"the resolved files in {pending} change nothing; {name} would be empty")
    result.stacked_on = _refuse_out_of_order(catalogue, folders, folder, name, tree, outcomes)
    write_pin(folder / name / f"vllm-{version}", version, name, files)
    fileops.remove_tree(pending)
    drop_if_done(folder / name / CONFLICTS)
    return result


def _refuse_out_of_order(
    catalogue: Catalogue,
    folders: Sequence[Path],
    folder: Path,
    name: str,
    tree: Target,
    outcomes: Mapping[str, tuple[str, str, str, str]],
) -> list[str]:
    """NAME's diff on each file is made on every other patch touching it: refuse when one of them
    would replay after NAME; else the patches it is stacked on, in series order."""
    others = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    lay = layout(others, tree.version, tree.record)
    stacked = {rel: [s.patch for s in lay.steps.get(rel, [])] for rel in outcomes}
    refuse_out_of_order(catalogue, folders, folder, name, stacked)
    below = [n for n in others.names if n in {n for names in stacked.values() for n in names}]
    # and what those are stacked on in turn (eagle3-minimax-m2's speculative.py diff is made on
    # eagle3-whitelist's): the apply hint names every patch the series needs
    deeper = builds_on(others, tree.version, tree.record, below)
    return [n for n in others.names if n in {*below, *deeper}]
