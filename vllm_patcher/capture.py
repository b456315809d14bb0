"""``capture NAME``: turn edits made by hand in the installed vLLM into a patch folder.

The patch-package workflow: edit files of the installed release, then capture writes NAME's diff
and manifest for that release into the first user patches folder, from the bytes the patches
before NAME in the series produce (pristine when none) to the edited bytes, and records NAME as
applied, so status, revert, verify and the fingerprint treat it like a built-in. The site's files
are not touched; only the tool's record and its pristine copies change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import fileops, pinned, sources
from . import journal as journal_mod
from .errors import CaptureRefused, PatchFolderError, StateError
from .journal import FileRecord, Journal, PatchRecord, Phase
from .patchset import PATCH_TOML, Catalogue, Layout, layout
from .plan import PINNED_DIFF, _run
from .status import _transform_would_change
from .target import Target, file_hash


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
    folder: Path,
    name: str,
    paths: tuple[str, ...] = (),
    releases: str | None = None,
    summary: str | None = None,
    on_wait: Callable[[str], None] | None = None,
    wheels: Mapping[str, Path] | None = None,
) -> CaptureResult:
    existing = catalogue.get(name)
    if existing is not None and existing.folder.resolve() != (folder / name).resolve():
        raise PatchFolderError(
            f"a patch named {name!r} already exists ({existing.origin}: {existing.folder}); "
            "choose another name"
        )
    others = Catalogue(tuple(p for p in catalogue.patches if p.name != name))
    root = target.site_packages
    with journal_mod.locked(root, on_wait=on_wait):
        journal = journal_mod.load(root)
        if journal is not None and not journal.finished:
            raise StateError(
                f"an earlier run was interrupted; run `{target.command('apply')}` to recover first"
            )
        rels = _candidates(target, paths)
        edited: list[
            tuple[str, bytes, bytes, list[str], str]
        ] = []  # rel, base, now, below, pristine
        pristine_needed = [r for r in rels if journal is None or r not in journal.files]
        for rel in rels:
            now = fileops.read_or_none(target.path(rel))
            if now is None:
                if not paths:
                    continue  # RECORD lists files this install may lack (a trimmed image)
                raise CaptureRefused(
                    f"{target.path(rel)} is missing; capture edits existing files only"
                )
            rec = journal.files.get(rel) if journal is not None else None
            if rec is None:
                if file_hash(now) == target.record[rel]:
                    continue
                edited.append((rel, b"", now, [], target.record[rel]))
                continue
            below = [n for n in rec.patches if n != name]
            if name not in rec.patches and file_hash(now) == rec.after:
                continue  # exactly what the recorded patches produce
            edited.append((rel, b"", now, below, rec.before))
        if not edited:
            raise CaptureRefused(
                f"no file of vLLM {target.version} differs from what its patches produce"
                + (f" among {', '.join(paths)}" if paths else "")
                + "; edit the installed files first, then capture"
            )
        series = layout(others, target.version, target.record)
        for rel, _, _, below, _ in edited:
            _refuse_builtins_not_applied(target, catalogue, series, name, rel, below, None)
        pristine = _pristine_bytes(
            target, journal, [e[0] for e in edited if e[0] in pristine_needed], wheels
        )
        files: list[tuple[str, str, str]] = []
        records: dict[str, FileRecord] = {}
        for rel, _, now, below, before_hash in edited:
            start = pristine[rel] if rel in pristine else _copy(target, rel, before_hash)
            _refuse_builtins_not_applied(target, catalogue, series, name, rel, below, start)
            base = _replay(target, others, rel, start, below)
            try:
                base_text, now_text = base.decode("utf-8"), now.decode("utf-8")
            except UnicodeDecodeError:
                raise CaptureRefused(
                    f"{target.path(rel)} is not UTF-8 text; capture takes text files only"
                ) from None
            if base == now:
                continue
            if not base_text.endswith("\n") or not now_text.endswith("\n"):
                raise CaptureRefused(
                    f"{target.path(rel)} does not end with a newline; add one and capture again"
                )
            files.append((rel, base_text, now_text))
            records[rel] = FileRecord([*below, name], before_hash, file_hash(now))
        if not files:
            raise CaptureRefused(
                "the edited files equal what the patches below NAME produce; nothing to capture"
            )
        patch_dir = folder / name
        replaced = (patch_dir / f"vllm-{target.version}").exists()
        _write_patch_toml(patch_dir, name, target.version, releases, summary)
        release_dir = patch_dir / f"vllm-{target.version}"
        if release_dir.exists():  # a second capture replaces this release's diff
            for stale in release_dir.iterdir():
                stale.unlink()
        pinned.write_pin(release_dir, target.version, name, files)
        _record(target, journal, name, records, pristine)
    return CaptureResult(name, target.version, patch_dir, sorted(records), replaced)


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
            if not _transform_would_change(step.transform, start):
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
    tree = sources.fetch_release(target.version.split("+", 1)[0], rels, wheels=wheels)
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
        raise CaptureRefused(
            f"{rel} carries {', '.join(missing) or 'patches'} whose diff this run does not have, so "
            "your edit cannot be separated from it; give its folder with --patches"
        )
    after, _ = _run(target, rel, steps, start, False, [], set())
    return after


def _write_patch_toml(
    patch_dir: Path, name: str, version: str, releases: str | None, summary: str | None
) -> None:
    path = patch_dir / PATCH_TOML
    if path.exists() and releases is None and summary is None:
        return
    import tomli_w  # only the commands that write patch.toml need it

    fields: dict[str, str | list[str]] = {
        "name": name,
        "summary": summary or f"captured from an edit of vLLM {version}",
        "releases": releases or f"=={version}",
    }
    if path.exists():
        from .patchset import _read_toml

        old = _read_toml(path)
        fields["summary"] = summary or str(old.get("summary", fields["summary"]))
        # a list of specifiers (port adds the releases it ports to) stays a list
        kept = old.get("releases", fields["releases"])
        fields["releases"] = releases or (kept if isinstance(kept, list) else str(kept))
        fixed = old.get("fixed_in")
        if fixed:
            fields["fixed_in"] = str(fixed)
    patch_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(fields), encoding="utf-8")


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
            if not fr.patches:
                raise CaptureRefused(
                    f"{rel} no longer differs from pristine, but {name} was recorded on it; "
                    f"run `{target.command('revert')}` and capture again"
                )
    new.files.update(records)
    new.patches[name] = PatchRecord(PINNED_DIFF, sorted(records))
    for rel, data in pristine.items():
        copy = journal_mod.pristine_path(root, rel)
        fileops.ensure_dir(copy.parent)
        fileops.atomic_write(copy, data)
    new.phase = Phase.APPLIED
    journal_mod.save(root, new)
