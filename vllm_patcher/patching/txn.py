"""Apply and revert as transactions: all files change or none do, and nothing is lost.

One shape for both: take the lock, load the journal, recover what an interrupted run left,
survey (each file read once, bytes kept), judge, plan, then commit and return the final status,
computed from the bytes written rather than read again. Nothing is judged or planned outside the
lock, so a concurrent run can never make this one refuse or plan from stale bytes.

Committing an apply: store the pristine bytes, write the journal with phase ``applying``, replace
each file atomically, mark the journal ``applied``. A revert writes phase ``reverting`` first and
removes the journal last. Any failure or Ctrl-C puts every file back by its bytes (and the journal
as it was); a kill leaves the journal, and the next run first brings every file it names back to
pristine.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from .. import fileops
from ..catalogue import support
from ..catalogue.layout import layout
from ..catalogue.model import Catalogue
from ..diffs import pinned
from ..errors import LocallyModified, NotWritable, PatcherError, StateError
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from . import journal as journal_mod
from . import status as status_mod
from .journal import FileRecord, Journal, PatchRecord, Phase
from .plan import FileEdit, RevertPlan, plan_apply, plan_revert

# Plain classes (and named tuples in plan): no dataclass on apply's and revert's start-up path.


class ApplyResult:
    def __init__(
        self,
        edits: list[FileEdit],
        dry_run: bool,
        status: status_mod.Status | None = None,
        recovered: list[str] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.edits = edits
        self.dry_run = dry_run
        self.status = status
        self.recovered: list[str] = recovered or []
        self.notes: list[str] = notes or []

    @property
    def diff(self) -> str:
        """The unified diff of the edits (rendered on demand: difflib is not free on 60 KB files)."""
        return "".join(
            pinned.make_diff(e.path, e.before.decode("utf-8"), e.after.decode("utf-8"))
            for e in self.edits
            if not e.adopted
        )

    @property
    def methods(self) -> dict[str, str]:
        return {
            p: ("adopted" if e.adopted else e.method) for e in self.edits for p in e.new_patches
        }

    @property
    def changed(self) -> list[str]:
        return [e.path for e in self.edits if not e.adopted]

    @property
    def adopted(self) -> list[str]:
        return [e.path for e in self.edits if e.adopted]

    def to_dict(self) -> dict[str, object]:
        st = self.status
        methods = self.methods
        data: dict[str, object] = {
            "vllm_version": st.vllm_version if st else None,
            "location": st.location if st else None,
            "dry_run": self.dry_run,
            "changed": [] if self.dry_run else self.changed,
            "adopted": [] if self.dry_run else self.adopted,
            "would_change": [e.path for e in self.edits] if self.dry_run else [],
            "recovered": self.recovered,
            "notes": self.notes,
            "fingerprint": st.fingerprint if st else None,
            "patches": [
                {
                    "name": p.name,
                    "state": p.state.value,
                    "method": methods.get(p.name, p.method),
                    "files": p.files,
                }
                for p in (st.patches if st else [])
            ],
        }
        if self.dry_run:
            data["diff"] = self.diff
        return data


class RevertResult:
    def __init__(
        self,
        restored: list[str] | None = None,
        saved_edits: dict[str, str] | None = None,
        already_pristine: list[str] | None = None,
        recovered: list[str] | None = None,
    ) -> None:
        self.restored: list[str] = restored or []
        self.saved_edits: dict[str, str] = saved_edits or {}
        self.already_pristine: list[str] = already_pristine or []
        self.recovered: list[str] = recovered or []

    def to_dict(self) -> dict[str, object]:
        return {
            "restored": self.restored,
            "recovered": self.recovered,
            "already_pristine": self.already_pristine,
            "saved_edits": self.saved_edits,
        }


def _check_inside_package(target: Target, rel: str) -> Path:
    """Never follow a link out of the vLLM package."""
    path = target.path(rel)
    package = target.package_dir.resolve()
    resolved = path.resolve()
    if path.is_symlink() or not resolved.is_relative_to(package):
        raise LocallyModified(
            f"{path} is a link leading outside the vLLM package; refusing to write through it"
        )
    return path


def _writable_dir(directory: Path) -> bool:
    try:
        st = directory.stat()
    except OSError:
        return False
    if not os.access(directory, os.W_OK):
        return False
    # root passes os.access on any mode; a directory made read-only on purpose is still refused.
    return not (os.geteuid() == 0 and not st.st_mode & stat.S_IWUSR)


def _require_writable(target: Target, rels: list[str]) -> None:
    dirs = {target.site_packages} | {target.path(rel).parent for rel in rels}
    state_dir = journal_mod.state_dir(target.site_packages)
    if state_dir.exists():
        dirs.add(state_dir)
    for d in sorted(dirs):
        if not _writable_dir(d):
            raise NotWritable(
                f"{d} is read-only; run as the environment's owner or make it writable, nothing was changed"
            )


def _drop_bytecode(path: Path) -> None:
    cache = path.parent / "__pycache__"
    if not cache.is_dir():
        return
    for pyc in cache.glob(f"{path.stem}.*.pyc"):
        with contextlib.suppress(OSError):
            pyc.unlink()


def _mode_of(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _write_file(target: Target, rel: str, data: bytes) -> None:
    path = target.path(rel)
    fileops.atomic_write(path, data, _mode_of(path))
    _drop_bytecode(path)


def _read_pristine_copy(target: Target, rel: str, expected: str, after: str | None = None) -> bytes:
    """The kept pristine bytes of ``rel``, checked against the journal's before-hash and, where
    the installer's RECORD knows the file, against RECORD too: a copy and a before-hash changed
    together must not be written back as pristine. A RECORD that lists the patched bytes
    (``after``: regenerated after apply) says nothing about pristine; the journal decides then.
    Editable and source installs have no installer hash; their record is the journal's."""
    copy = journal_mod.pristine_path(target.site_packages, rel)
    hint = target.reinstall_hint
    try:
        data = copy.read_bytes()
    except OSError:
        raise StateError(
            f"the pristine copy of {rel} is missing; nothing was changed; {hint}"
        ) from None
    if file_hash(data) != expected:
        raise StateError(f"the pristine copy of {rel} is corrupt; nothing was changed; {hint}")
    installed = target.record.get(rel) if target.reference == RECORD_REFERENCE else None
    if installed is not None and installed not in (expected, after):
        raise StateError(
            f"the pristine copy of {rel} in {journal_mod.state_dir(target.site_packages)} does "
            f"not match vLLM {target.version}'s RECORD; nothing was changed; {hint}, then "
            f"remove {journal_mod.state_dir(target.site_packages)}"
        )
    return data


# --- under the lock ----------------------------------------------------------------------------


def _tidy(target: Target, journal: Journal | None, rels: list[str]) -> None:
    """Remove what a killed run may have left: temp files, and pristine copies no record names."""
    root = target.site_packages
    directory = journal_mod.state_dir(root)
    pristine = directory / "pristine"
    folders = {target.path(rel).parent for rel in rels} | {directory}
    if pristine.is_dir():
        named = set(journal.files) if journal is not None else set()
        for copy in [p for p in pristine.rglob("*") if p.is_file()]:
            rel = copy.relative_to(pristine).as_posix()
            if rel not in named:
                with contextlib.suppress(OSError):
                    copy.unlink()
            folders.add(copy.parent)
        fileops.prune_empty_dirs(pristine)
    fileops.sweep_temp_files(sorted(d for d in folders if d.is_dir()))


def _recover(
    target: Target,
    journal: Journal,
    contents: dict[str, bytes | None],
    force: bool = False,
    kept: dict[str, str] | None = None,
) -> list[str]:
    """Bring every file an unfinished journal names back to pristine, then forget the journal.

    ``contents`` is updated with the bytes each file ends with, so nothing is read twice. With
    ``force``, a file that matches neither side (an edit made after the interruption) is copied
    to saved/ first, like any edit ``revert --force`` restores; ``kept`` gets where.
    """
    plan: list[tuple[str, bytes]] = []
    edited: list[str] = []
    for rel, fr in journal.files.items():
        path = _check_inside_package(target, rel)
        data = status_mod.read_once(target, rel, contents)
        cur = file_hash(data) if data is not None else None
        if cur == fr.before:
            continue
        if cur not in (fr.after, fr.was) and not force:
            raise LocallyModified(
                f"{path} changed during an interrupted run and matches neither the pristine nor the "
                f"patched bytes; nothing was changed; run `{target.command('revert --force')}` (keeps "
                "a copy of it) or reinstall vLLM"
            )
        if cur not in (fr.after, fr.was):
            edited.append(rel)
        plan.append((rel, _read_pristine_copy(target, rel, fr.before, fr.after)))
    saved = _save_edits(target, edited, contents)
    if kept is not None:
        kept.update(saved)
    # Written back as a whole or not at all: a run stopped part-way puts back what it wrote (the
    # unfinished journal stays, for the next run) and drops the copies whose edits are back.
    written: list[FileEdit] = []
    absent = tuple(rel for rel, _ in plan if contents[rel] is None)
    try:
        for rel, data in plan:
            written.append(FileEdit(rel, contents[rel] or b"", data, (), "recover"))
            _write_file(target, rel, data)
    except BaseException:
        _roll_back(target, written, to_before=True, absent=absent)
        _drop_copies_if_in_place(target, saved, contents)
        raise
    for rel, data in plan:
        contents[rel] = data
    journal_mod.clear(target.site_packages, list(journal.files))
    return [rel for rel, _ in plan]


def apply(
    target: Target,
    catalogue: Catalogue,
    *,
    dry_run: bool = False,
    strict: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> ApplyResult:
    support.classify(target.version)  # refuses releases before the allow-list existed
    root = target.site_packages
    if not (journal_mod.state_dir(root) / "state.json").exists():
        quick = layout(catalogue, target.version, target.record)
        if quick.all_upstream:
            return ApplyResult(
                [],
                dry_run,
                status=status_mod.read_status(target, catalogue),
                notes=[f"vLLM {target.version} already has every change"],
            )
    rels = catalogue.paths_for(target.version)
    for rel in rels:
        if rel in target.record:
            _check_inside_package(target, rel)
    if not dry_run:
        _require_writable(target, [r for r in rels if r in target.record])
    with journal_mod.locked(root, on_wait=on_wait, read_only=dry_run):
        journal = journal_mod.load(root)
        contents: dict[str, bytes | None] = {}
        recovered: list[str] = []
        if journal is not None and not journal.finished:
            if dry_run:
                raise StateError(
                    f"an earlier run was interrupted; run `{target.command('apply')}` to recover first"
                )
            recovered = _recover(target, journal, contents)
            journal = None
        lay = layout(catalogue, target.version, target.record, status_mod.recorded_files(journal))
        for rel in lay.steps:
            _check_inside_package(target, rel)
        if not dry_run:
            _tidy(target, journal, list(lay.steps))
        files = status_mod.survey(target, journal, lay, contents, detect_upstream=False)
        fileops.fault_point("surveyed")
        notes: list[str] = []
        edits = plan_apply(
            target,
            journal,
            lay,
            files,
            contents,
            lambda rel, before: _read_pristine_copy(
                target, rel, before, journal.files[rel].after if journal else None
            ),
            strict,
            notes,
        )
        fileops.fault_point("planned")
        if not dry_run and edits:
            journal = _commit_apply(target, journal, edits)
            for e in edits:
                contents[e.path] = e.after
        # The final status from the bytes now on disk, without reading them again.
        final = layout(
            Catalogue(catalogue.patches),  # every patch, as status shows them
            target.version,
            target.record,
            status_mod.recorded_files(journal),
        )
        files = status_mod.survey(target, journal, final, contents)
        return ApplyResult(
            edits, dry_run, status_mod.judge(target, journal, final, files), recovered, notes
        )


def _commit_apply(target: Target, old: Journal | None, edits: list[FileEdit]) -> Journal:
    root = target.site_packages
    new = Journal(
        vllm_version=target.version,
        phase=Phase.APPLYING,
        patches={k: PatchRecord(v.method, list(v.files)) for k, v in old.patches.items()}
        if old
        else {},
        files=dict(old.files) if old else {},
    )
    for e in edits:
        was = e.before_hash if e.base is not None else None
        earlier = old.files[e.path].patches if old and e.path in old.files and was else []
        new.files[e.path] = FileRecord(list(e.patches), e.pristine_hash, e.after_hash, was)
        for patch in earlier:
            rec = new.patches.get(patch)
            if patch not in e.patches and rec is not None and e.path in rec.files:
                # its current version no longer changes this file
                rec.files = [f for f in rec.files if f != e.path]
        for patch in e.patches:
            rec = new.patches.setdefault(patch, PatchRecord(method=e.method, files=[]))
            if patch not in earlier:  # patches stacked on keep the method they were applied by
                rec.method = e.method
            if e.path not in rec.files:
                rec.files.append(e.path)
    written = [e for e in edits if not e.adopted]
    back: list[str] = []  # files no patch changes any more: pristine again, then forgotten
    try:
        for e in edits:
            if e.base is not None:
                continue  # the pristine copy from the earlier apply stays
            copy = journal_mod.pristine_path(root, e.path)
            fileops.ensure_dir(copy.parent)
            fileops.atomic_write(copy, e.before)
        journal_mod.save(root, new)
        for e in written:
            _write_file(target, e.path, e.after)
        new.phase = Phase.APPLIED
        for done in new.files.values():
            done.was = None
        back = [rel for rel, fr in new.files.items() if not fr.patches]
        for rel in back:
            del new.files[rel]
        new.patches = {k: v for k, v in new.patches.items() if v.files}
        journal_mod.save(root, new)
    except BaseException:
        # Judge every file by its bytes, not by how far the loop got: an interrupt can land
        # after a replace and before the loop notices.
        if _roll_back(target, written, to_before=True):
            with contextlib.suppress(PatcherError, OSError):
                _restore_journal(target, old, [e.path for e in edits])
        # otherwise the "applying" journal stays, and the next apply or revert recovers from it
        raise
    for rel in back:  # no record names these copies now (a later run's tidy would remove them)
        with contextlib.suppress(PatcherError, OSError):
            fileops.remove(journal_mod.pristine_path(root, rel))
    return new


def _restore_journal(target: Target, old: Journal | None, new_rels: list[str]) -> None:
    root = target.site_packages
    if old is not None:
        journal_mod.save(root, old)
        for rel in new_rels:
            if rel not in old.files:
                fileops.remove(journal_mod.pristine_path(root, rel))
    else:
        journal_mod.clear(root, new_rels)


def _roll_back(
    target: Target, edits: list[FileEdit], to_before: bool, absent: tuple[str, ...] = ()
) -> bool:
    """Put each file back to its ``before`` bytes wherever ``after`` landed; True when all are."""
    clean = True
    for e in reversed(edits):
        want, landed = (e.before, e.after) if to_before else (e.after, e.before)
        path = target.path(e.path)
        try:
            current = fileops.read_or_none(path)
            if current == landed:
                if e.path in absent:
                    fileops.remove(path)
                else:
                    _write_file(target, e.path, want)
            elif current != want and not (e.path in absent and current is None):
                clean = False
        except (OSError, PatcherError):
            clean = False
    return clean


def revert(
    target: Target, *, force: bool = False, on_wait: Callable[[str], None] | None = None
) -> RevertResult:
    root = target.site_packages
    journal_mod.check_state_dir(root)
    if (
        not (journal_mod.state_dir(root) / "state.json").exists()
        and not (journal_mod.state_dir(root) / "pristine").exists()
    ):
        return RevertResult()  # never applied here: no lock, no state folder created
    with journal_mod.locked(root, on_wait=on_wait):
        journal = journal_mod.load(root)
        rels = sorted(journal.files) if journal else []
        _tidy(target, journal, rels)
        if journal is None:
            return RevertResult()
        for rel in journal.files:
            _check_inside_package(target, rel)
        _require_writable(target, list(journal.files))
        contents: dict[str, bytes | None] = {}
        if not journal.finished:
            kept: dict[str, str] = {}
            recovered = _recover(target, journal, contents, force=force, kept=kept)
            return RevertResult(recovered=recovered, saved_edits=kept)
        for rel in journal.files:
            status_mod.read_once(target, rel, contents)
        fileops.fault_point("surveyed")
        plan = plan_revert(
            journal,
            contents,
            lambda rel, before: _read_pristine_copy(target, rel, before, journal.files[rel].after),
        )
        if plan.edited and not force:
            names = ", ".join(str(target.path(r)) for r in plan.edited)
            raise LocallyModified(
                f"{names} changed after vllm-patcher applied it; nothing was reverted; "
                f"run `{target.command('revert --force')}` to restore pristine and keep your copy"
            )
        fileops.fault_point("planned")
        result = RevertResult(already_pristine=plan.already_pristine)
        result.saved_edits = _save_edits(target, plan.edited, contents)
        try:
            _commit_revert(target, journal, plan)
        except BaseException:  # rolled back: the copies whose edits are back are not kept
            _drop_copies_if_in_place(target, result.saved_edits, contents)
            raise
        result.restored = [e.path for e in plan.edits]
        return result


def _drop_copies_if_in_place(
    target: Target, saved: dict[str, str], contents: dict[str, bytes | None]
) -> None:
    """After a forced revert that failed: remove its saved/ folder when every edit it copied is
    still (or again) in its file, so a failed run leaves nothing; otherwise the copies stay."""
    if not saved:
        return
    rel, where = next(iter(saved.items()))
    folder = Path(where).parents[len(Path(rel).parts) - 1]
    try:
        if all(fileops.read_or_none(target.path(r)) == contents[r] for r in saved):
            import shutil  # only on this path

            shutil.rmtree(folder, ignore_errors=True)
    except OSError:
        pass


def _new_saved_folder(saved: Path) -> Path:
    """A folder of its own under saved/, named by the second (``-2``, ``-3``... after the first of
    that second), so a copy kept earlier is never written over. The run holds the lock. Never
    through a link: it could point anywhere, the package included."""
    if saved.is_symlink():
        raise LocallyModified(
            f"{saved} is a link; refusing to keep copies of your edits through it; nothing was "
            "changed (remove the link, then run this again)"
        )
    fileops.ensure_dir(saved)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for n in range(1, 10_000):
        folder = saved / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise NotWritable(fileops.os_error_message(folder, exc)) from None
        return folder
    raise NotWritable(f"{saved}: no free folder name for {stamp}; move old copies out")


def _save_edits(
    target: Target, edited: list[str], contents: dict[str, bytes | None]
) -> dict[str, str]:
    """Copy each edited file's bytes to a new folder under saved/; where each went."""
    saved: dict[str, str] = {}
    if not edited:
        return saved
    folder = _new_saved_folder(journal_mod.state_dir(target.site_packages) / "saved")
    try:
        for rel in edited:
            dest = folder / rel
            fileops.ensure_dir(dest.parent)
            fileops.atomic_write(dest, contents[rel] or b"")
            saved[rel] = str(dest)
    except BaseException:  # nothing restored yet: the edits are still in place, drop the part
        import shutil  # only on this path

        shutil.rmtree(folder, ignore_errors=True)
        raise
    return saved


def _commit_revert(target: Target, journal: Journal, plan: RevertPlan) -> None:
    root = target.site_packages
    journal.phase = Phase.REVERTING
    try:
        journal_mod.save(root, journal)
        for e in plan.edits:
            _write_file(target, e.path, e.after)
    except BaseException:
        journal.phase = Phase.APPLIED
        if _roll_back(target, plan.edits, to_before=True, absent=tuple(plan.absent)):
            with contextlib.suppress(PatcherError, OSError):
                journal_mod.save(root, journal)
        # otherwise the "reverting" journal stays, and the next run finishes the revert
        raise
    # Every file is pristine now. If forgetting the record fails, the "reverting" journal names
    # only pristine files, and the next run completes the clean-up; the revert itself happened.
    with contextlib.suppress(PatcherError, OSError):
        journal_mod.clear(root, list(journal.files))
