"""``capture NAME``: turn edits made by hand in the installed vLLM into a patch folder.

The patch-package workflow: edit files of the installed release, then capture writes NAME's diff
and manifest for that release, from the bytes the patches before NAME in the series produce
(pristine when none) to the edited bytes, and records NAME as applied, so status, revert, verify
and the fingerprint treat it like a built-in. The site's files are not touched; only the tool's
record and its pristine copies change.

NAME goes where the same options replay it on top of what its diff is made on: into the folder
that already holds it, else the last patches folder given (a folder with a ``series`` file gets
NAME appended to it). When the names' order within a folder, or the folders' order, would replay
NAME before a patch its diff is stacked on, capture (and import) refuse and say which order works.
Every refusal comes before the first write.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import fileops
from ..catalogue.layout import Layout, layout
from ..catalogue.model import SERIES, Catalogue
from ..catalogue.writer import add_to_series, write_patch_toml, write_pin
from ..diffs import pinned
from ..errors import CaptureRefused, PatcherError, PatchFolderError, StateError
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from ..patching import journal as journal_mod
from ..patching.journal import FileRecord, Journal, PatchRecord, Phase
from ..patching.plan import run_steps
from ..patching.states import PINNED_DIFF
from ..patching.survey import transform_would_change
from ..releases import public_version
from ..wheels import sources


@dataclass
class CaptureResult:
    name: str
    version: str
    folder: Path
    files: list[str] = field(default_factory=list)
    replaced: bool = False  # an earlier capture of NAME for this release was replaced

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "vllm_version": self.version,
            "folder": str(self.folder),
            "files": self.files,
            "replaced": self.replaced,
        }


def capture(
    target: Target,
    catalogue: Catalogue,
    folders: Sequence[Path],
    name: str,
    paths: tuple[str, ...] = (),
    releases: str | None = None,
    summary: str | None = None,
    on_wait: Callable[[str], None] | None = None,
    wheels: Mapping[str, Path] | None = None,
) -> CaptureResult:
    folder = destination(catalogue, folders, name)
    others = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    root = target.site_packages
    with journal_mod.locked(root, on_wait=on_wait):
        journal = journal_mod.load(root)
        if journal is not None and not journal.finished:
            raise StateError(
                f"an earlier run was interrupted; run `{target.command('apply')}` to recover first"
            )
        rels = _candidates(target, paths)
        if not paths:
            _refuse_new_files(target)
        edited = _edited_files(target, journal, name, paths, rels)
        series = layout(others, target.version, target.record)
        for rel, _, below, _ in edited:
            _refuse_builtins_not_applied(target, catalogue, series, name, rel, below, None)
        pristine_needed = [r for r, *_ in edited if journal is None or r not in journal.files]
        pristine = _pristine_bytes(target, journal, pristine_needed, wheels)
        files: list[tuple[str, str, str]] = []
        records: dict[str, FileRecord] = {}
        for rel, now, below, before_hash in edited:
            start = pristine[rel] if rel in pristine else _copy(target, rel, before_hash)
            _refuse_builtins_not_applied(target, catalogue, series, name, rel, below, start)
            texts = _texts(target, rel, _replay(target, others, rel, start, below), now)
            if texts is not None:
                files.append((rel, *texts))
                records[rel] = FileRecord([*below, name], before_hash, file_hash(now))
        if not files:
            raise CaptureRefused(
                "the edited files equal what the patches below NAME produce; nothing to capture"
            )
        refuse_out_of_order(
            catalogue, folders, folder, name, {rel: fr.patches[:-1] for rel, fr in records.items()}
        )
        _refuse_dropped_files(target, journal, name, records)
        patch_dir = folder / name
        replaced = _write_capture(folder, name, target.version, releases, summary, files)
        _record(target, journal, name, records, pristine)
    return CaptureResult(name, target.version, patch_dir, sorted(records), replaced)


# An edited file: rel, its bytes now, the patches recorded below NAME on it, its hash before them.
_Edited = tuple[str, bytes, list[str], str]


def _edited_files(
    target: Target,
    journal: Journal | None,
    name: str,
    paths: tuple[str, ...],
    rels: list[str],
) -> list[_Edited]:
    """The files that differ from what their recorded patches (or the release) produce."""
    # an install holds vllm/__init__.py; a tree without it (the tool's pristine copies of a
    # release) holds only some of RECORD's files, so a file missing there is no deletion
    installed = (target.package_dir / "__init__.py").is_file()
    edited: list[_Edited] = []
    for rel in rels:
        now = fileops.read_or_none(target.path(rel))
        if now is None:
            if not paths and not installed:
                continue
            raise CaptureRefused(
                f"{target.path(rel)} is "
                + ("missing" if paths else "deleted (RECORD lists it)")
                + "; capture takes edits of existing files only: put it back"
                + ("" if paths else ", or name the edited files (capture NAME PATH...)")
            )
        rec = journal.files.get(rel) if journal is not None else None
        if rec is None:
            if file_hash(now) != target.record[rel]:
                edited.append((rel, now, [], target.record[rel]))
            continue
        below = [n for n in rec.patches if n != name]
        if name not in rec.patches and file_hash(now) == rec.after:
            continue  # exactly what the recorded patches produce
        above = rec.patches[rec.patches.index(name) + 1 :] if name in rec.patches else []
        if above:
            raise CaptureRefused(
                f"{rel} carries {above[0]} on top of {name}, so {name} cannot be captured "
                "again below it; capture the new edit as a patch of its own"
            )
        edited.append((rel, now, below, rec.before))
    if not edited:
        raise CaptureRefused(
            f"no file of vLLM {target.version} differs from what its patches produce"
            + (f" among {', '.join(paths)}" if paths else "")
            + "; edit the installed files first, then capture"
        )
    return edited


def _texts(target: Target, rel: str, base: bytes, now: bytes) -> tuple[str, str] | None:
    """The file's text below NAME and now, for its diff; None when they are the same."""
    try:
        base_text, now_text = base.decode("utf-8"), now.decode("utf-8")
    except UnicodeDecodeError:
        raise CaptureRefused(
            f"{target.path(rel)} is not UTF-8 text; capture takes text files only"
        ) from None
    if base == now:
        return None
    if not base_text.endswith("\n") or not now_text.endswith("\n"):
        raise CaptureRefused(
            f"{target.path(rel)} does not end with a newline; add one and capture again"
        )
    _refuse_unreplayable(target, rel, base_text, now_text)
    return base_text, now_text


def _write_capture(
    folder: Path,
    name: str,
    version: str,
    releases: str | None,
    summary: str | None,
    files: list[tuple[str, str, str]],
) -> bool:
    """Write NAME's folder for ``version``; True when it replaced a diff of that release."""
    patch_dir = folder / name
    release_dir = patch_dir / f"vllm-{version}"
    replaced = release_dir.exists()
    write_patch_toml(patch_dir, name, version, releases, summary)
    if replaced:  # a second capture replaces this release's diff
        for stale in release_dir.iterdir():
            fileops.remove(stale)
    write_pin(release_dir, version, name, files)
    add_to_series(folder, name)
    return replaced


def _refuse_builtins_not_applied(
    target: Target,
    catalogue: Catalogue,
    series: Layout,
    name: str,
    rel: str,
    below: list[str],
    start: bytes | None,
) -> None:
    """Refuse an edit of a file that a built-in the default apply runs also changes, while that
    built-in is not applied here: a series replays the built-ins first, so a diff made on these
    bytes would never apply after them (on any machine). Pinned steps are judged at once;
    with ``start`` (the pristine bytes), a built-in with only a transform counts when the
    transform would change them (a build that has the change upstream needs nothing)."""
    missing = []
    for step in series.steps.get(rel, []):
        patch = catalogue.get(step.patch)
        if patch is None or not patch.builtin or step.patch in below:
            continue
        if not catalogue.is_selected(step.patch):
            continue
        if step.pinned is None:
            if start is None or step.transform is None:
                continue
            if not transform_would_change(step.transform, start, target.version):
                continue
        missing.append(step.patch)
    if missing:
        raise CaptureRefused(
            f"{rel} is also changed by {', '.join(missing)} (built-in, not applied here), which "
            f"apply runs before {name}, so a diff made on these bytes would not apply after "
            "them; nothing was written; put your edit aside, restore the file "
            f"({target.reinstall_hint}), run `{target.command('apply')}`, make the edit again, "
            "then capture"
        )


def destination(catalogue: Catalogue, folders: Sequence[Path], name: str) -> Path:
    """The folder NAME is written into: the one that holds it, else the last one given (the top
    of the series the same options replay)."""
    existing = catalogue.get(name)
    if existing is not None and existing.builtin:
        raise PatchFolderError(
            f"a patch named {name!r} already exists ({existing.origin}: {existing.folder}); "
            "choose another name"
        )
    if existing is not None:
        return Path(existing.origin)
    return folders[-1]


def replay_order(
    catalogue: Catalogue, folders: Sequence[Path], folder: Path, name: str
) -> list[str]:
    """Every patch name in the order these options replay them, NAME where the loader will put
    it once written into ``folder`` (appended to its series file, else sorted among its names)."""
    if name in catalogue.names:
        return list(catalogue.names)
    order = [p.name for p in catalogue.patches if p.builtin]
    for given in folders:
        here = [p.name for p in catalogue.patches if not p.builtin and p.origin == str(given)]
        if given == folder:
            here = [*here, name] if (folder / SERIES).is_file() else sorted([*here, name])
        order += here
    return order


def refuse_out_of_order(
    catalogue: Catalogue,
    folders: Sequence[Path],
    folder: Path,
    name: str,
    stacked: Mapping[str, Sequence[str]],
) -> None:
    """Refuse when NAME would replay before a patch its diff on a file is made on top of."""
    order = replay_order(catalogue, folders, folder, name)
    at = {n: i for i, n in enumerate(order)}
    for rel, below in sorted(stacked.items()):
        late = next((b for b in below if at.get(b, -1) > at[name]), None)
        if late is None:
            continue
        other = catalogue.get(late)
        where = Path(other.origin) if other is not None and not other.builtin else folder
        stack = f"its diff on {rel} is made on top of {late}"
        if where != folder:
            raise CaptureRefused(
                f"{name} in {folder} would replay before {late} in {where} (folders replay in "
                f"the order given), but {stack}; list --patches {folder} after --patches {where}"
            )
        series = folder / SERIES
        if series.is_file():
            raise CaptureRefused(
                f"{series} lists {name} before {late}, but {stack}; list {name} after {late} there"
            )
        raise CaptureRefused(
            f"{name} would replay before {late} (names sort within {folder}), but {stack}; "
            f"choose a name that sorts after {late}, or list the folder's order in {series}"
        )


def _refuse_new_files(target: Target) -> None:
    """A file under vllm/ that RECORD does not list (bytecode and the tool's temp files aside)
    cannot be a patch: capture takes edits of the files the release installed."""
    if target.reference != RECORD_REFERENCE:
        return  # editable and source trees are judged on the pinned files only
    for dirpath, dirnames, filenames in os.walk(target.package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fname in sorted(filenames):
            if fname.endswith((".pyc", fileops.TMP_SUFFIX)):
                continue
            rel = Path(dirpath, fname).relative_to(target.site_packages).as_posix()
            if rel not in target.record:
                raise CaptureRefused(
                    f"{target.path(rel)} is a new file (vLLM {target.version}'s RECORD does not "
                    "list it); capture takes edits of existing files only: move it out of the "
                    "package, or name the edited files (capture NAME PATH...)"
                )


def _refuse_unreplayable(target: Target, rel: str, base: str, now: str) -> None:
    """The diff must give back ``now`` when the tool reads and applies it: the loader reads
    patch.diff with universal newlines, so a carriage return would be lost (and apply refuse)."""
    diff = pinned.make_diff(rel, base, now)
    as_read = diff.replace("\r\n", "\n").replace("\r", "\n")
    try:
        per_file = pinned.split_by_file(as_read, rel)
        ok = pinned.apply_exact(base, per_file[rel], rel) == now
    except (PatcherError, KeyError, ValueError):
        ok = False
    if ok:
        return
    if "\r" in diff:
        raise CaptureRefused(
            f"{target.path(rel)} has a carriage return (\\r, a CRLF line ending) in an edited "
            "line; capture writes diffs of \\n-ended lines only: remove the \\r "
            f"(sed -i 's/\\r$//' {target.path(rel)}) and capture again"
        )
    raise CaptureRefused(
        f"{target.path(rel)}: a diff of this edit would not give its bytes back (a line break "
        "other than \\n?); capture cannot take it"
    )


def _candidates(target: Target, paths: tuple[str, ...]) -> list[str]:
    if not paths:
        return sorted(target.record)
    rels = []
    package = target.package_dir.resolve()
    for p in paths:
        given = Path(p)
        if given.is_absolute() or given.exists():
            try:
                rel = "vllm/" + given.resolve().relative_to(package).as_posix()
            except ValueError:
                raise CaptureRefused(f"{p} is not inside the vLLM package at {package}") from None
        else:
            rel = p
        if rel not in target.record:
            raise CaptureRefused(
                f"{rel} is not a file vLLM {target.version} installed (new files cannot be "
                "captured; a patch edits files the release ships)"
            )
        rels.append(rel)
    return rels


def _pristine_bytes(
    target: Target,
    journal: Journal | None,
    rels: list[str],
    wheels: Mapping[str, Path] | None = None,
) -> dict[str, bytes]:
    """The release's own bytes of files the tool holds no copy of, checked against RECORD."""
    if not rels:
        return {}
    tree = sources.fetch_release(public_version(target.version), rels, wheels=wheels)
    out = {}
    for rel in rels:
        data = fileops.read_or_none(tree / rel)
        if data is None or file_hash(data) != target.record.get(rel):
            raise CaptureRefused(
                f"cannot get the pristine bytes of {rel} for vLLM {target.version} (the release "
                "wheel's file does not match this install's RECORD)"
            )
        out[rel] = data
    return out


def _copy(target: Target, rel: str, before: str) -> bytes:
    data = fileops.read_or_none(journal_mod.pristine_path(target.site_packages, rel))
    if data is None or file_hash(data) != before:
        raise StateError(
            f"the pristine copy of {rel} is missing or corrupt; {target.reinstall_hint}"
        )
    return data


def _replay(target: Target, others: Catalogue, rel: str, start: bytes, below: list[str]) -> bytes:
    """The bytes the patches recorded below NAME on ``rel`` produce from pristine."""
    if not below:
        return start
    unknown = [n for n in below if n not in others.names]
    if unknown:
        raise CaptureRefused(
            f"{rel} carries {unknown[0]}, whose folder this run was not given, so your edit "
            "cannot be separated from it; give its folder with --patches"
        )
    lay = layout(others.select(below), target.version, target.record)
    steps = [s for s in lay.steps.get(rel, []) if s.patch in below]
    if [s.patch for s in steps] != below:
        missing = [n for n in below if n not in {s.patch for s in steps}]
        if not missing:
            raise CaptureRefused(
                f"{rel} carries {', '.join(below)} in that order, but these options replay them "
                f"as {', '.join(s.patch for s in steps)}; give the --patches folders in the "
                "order they were applied with"
            )
        raise CaptureRefused(
            f"{rel} carries {', '.join(missing) or 'patches'} whose diff this run does not have, so "
            "your edit cannot be separated from it; give its folder with --patches"
        )
    after, _ = run_steps(target, rel, steps, start, False, [], set())
    return after


def _refuse_dropped_files(
    target: Target, journal: Journal | None, name: str, records: dict[str, FileRecord]
) -> None:
    """A recapture that no longer touches a file NAME alone was recorded on cannot be recorded."""
    for rel, fr in (journal.files if journal is not None else {}).items():
        if rel not in records and fr.patches == [name]:
            raise CaptureRefused(
                f"{rel} no longer differs from pristine, but {name} was recorded on it; "
                f"run `{target.command('revert')}` and capture again"
            )


def _record(
    target: Target,
    journal: Journal | None,
    name: str,
    records: dict[str, FileRecord],
    pristine: dict[str, bytes],
) -> None:
    """Record NAME as applied on exactly ``records`` (the site's files are already those bytes)."""
    root = target.site_packages
    new = journal or Journal(vllm_version=target.version, phase=Phase.APPLIED)
    for rel, fr in list(new.files.items()):
        if name in fr.patches and rel not in records:
            fr.patches.remove(name)  # a recapture no longer touches this file
    new.files.update(records)
    new.patches[name] = PatchRecord(PINNED_DIFF, sorted(records))
    for rel, data in pristine.items():
        copy = journal_mod.pristine_path(root, rel)
        fileops.ensure_dir(copy.parent)
        fileops.atomic_write(copy, data)
    new.phase = Phase.APPLIED
    journal_mod.save(root, new)
