"""``import NAME --diff FILE``: start a patch from an upstream change (a PR's ``.diff``, a
``git diff`` between tags).

The diff's hunks are applied, with context matching and bounded fuzz, to the installed release's
pristine files as the patches before NAME in the series leave them; the result becomes NAME's diff
and manifest for that release. Files outside ``vllm/`` (tests, docs) are dropped with a note.
Hunks that do not apply leave a ``.rej`` and a conflict-marked copy of the file under
``NAME/conflicts/vllm-VERSION/``; after fixing the copy, ``import NAME --continue`` finishes.
Nothing in site-packages is touched: ``apply`` does that.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import pinned
from .capture import _write_patch_toml
from .diffmerge import apply_fuzzy, split_upstream_diff
from .errors import BadSetting, PatchFolderError, PortConflict
from .patchset import Catalogue
from .porting import (
    CONFLICTS,
    _base_bytes,
    _tree_target,
    drop_if_done,
    refuse_markers,
    resolved_files,
    write_pending,
)
from .target import Target


@dataclass
class ImportResult:
    name: str
    version: str
    folder: Path
    written: bool
    files: dict[str, str] = field(default_factory=dict)  # rel -> clean | N hunks rejected | absent
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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
    folder: Path,
    name: str,
    diff_text: str,
    source: str,
    releases: str | None = None,
    summary: str | None = None,
    max_fuzz: int = 2,
    wheels: Mapping[str, Path] | None = None,
) -> ImportResult:
    _refuse_clash(catalogue, folder, name)
    version = target.version
    per_file, dropped = split_upstream_diff(diff_text)
    result = ImportResult(name, version, folder / name, False, dropped=dropped)
    if not per_file:
        raise PatchFolderError(f"{source} changes no file under vllm/; nothing to import")
    # NAME goes after every patch the catalogue has, so its base is what they all leave
    ordered = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    tree = _tree_target(version.split("+", 1)[0], sorted(per_file), wheels)
    outcomes: dict[str, tuple[str, str, str, str]] = {}  # rel -> (base, text, conflict, rejects)
    for rel, file_diff in per_file.items():
        if rel not in tree.record:
            result.files[rel] = "absent"
            continue
        base = _base_bytes(ordered, "", tree, rel, tree.path(rel).read_bytes()).decode("utf-8")
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
    _write_patch_toml(folder / name, name, version, releases, summary or f"imported from {source}")
    pending = _pending(folder, name, version)
    if pending.exists():
        shutil.rmtree(pending)
    if any(rej for *_, rej in outcomes.values()):
        write_pending(
            pending,
            {rel: conflict if rej else text for rel, (_, text, conflict, rej) in outcomes.items()},
        )
        for rel, (*_, rejects) in outcomes.items():
            if rejects:
                out = pending / rel
                out.with_name(out.name + ".rej").write_text(rejects, encoding="utf-8")
        result.notes.append(
            f"fix the conflict-marked files under {pending} (the .rej files hold the hunks that "
            f"did not apply), then run `vllm-patcher --patches {folder} import {name} --continue`"
        )
        return result
    files = [(rel, base, text) for rel, (base, text, _, _) in outcomes.items() if base != text]
    if not files:
        raise PatchFolderError(f"{source} is already in vLLM {version}; nothing to import")
    pinned.write_pin(folder / name / f"vllm-{version}", version, name, files)
    result.written = True
    return result


def continue_import(
    target: Target,
    catalogue: Catalogue,
    folder: Path,
    name: str,
    wheels: Mapping[str, Path] | None = None,
) -> ImportResult:
    version = target.version
    pending = _pending(folder, name, version)
    if not pending.is_dir():
        raise BadSetting(
            f"no import of {name} is waiting for vLLM {version} ({pending} is absent); "
            f"run `vllm-patcher --patches {folder} import {name} --diff FILE` first"
        )
    again = f"vllm-patcher --patches {folder} import {name} --continue"
    fixed = resolved_files(pending, again, target.record)
    refuse_markers(pending, fixed, again)
    ordered = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    tree = _tree_target(version.split("+", 1)[0], sorted(fixed), wheels)
    files = []
    result = ImportResult(name, version, folder / name, True)
    for rel, text in fixed.items():
        base = _base_bytes(ordered, "", tree, rel, tree.path(rel).read_bytes()).decode("utf-8")
        if text != base:
            files.append((rel, base, text))
            result.files[rel] = "resolved"
    if not files:
        raise PortConflict(f"the resolved files in {pending} change nothing; {name} would be empty")
    pinned.write_pin(folder / name / f"vllm-{version}", version, name, files)
    shutil.rmtree(pending)
    drop_if_done(folder / name / CONFLICTS)
    return result


def _refuse_clash(catalogue: Catalogue, folder: Path, name: str) -> None:
    existing = catalogue.get(name)
    if existing is not None and existing.folder.resolve() != (folder / name).resolve():
        raise PatchFolderError(
            f"a patch named {name!r} already exists ({existing.origin}: {existing.folder}); "
            "choose another name"
        )
