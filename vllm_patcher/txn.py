"""Apply and revert as transactions: all files change or none do, and nothing is lost.

Order of work for apply: survey by hashes (cheap); when something is pending, take the lock,
survey again, compute every new text (pinned diff or transform) before writing anything, store
the pristine bytes, write the state record with phase ``applying`` (the journal), replace each
file atomically, then mark the record ``applied``. A failure while replacing puts back what was
already replaced. A run killed midway leaves the journal, and the next apply or revert first
brings every file back to pristine from it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import catalog, pinned
from . import state as state_mod
from . import status as status_mod
from .catalog import Release
from .errors import LocallyModified, NotWritable, PatcherError, PatchShapeError, StateError
from .state import FileRecord, PatchRecord, PatchState
from .target import Target, file_hash


@dataclass
class FileEdit:
    path: str
    patch: str
    method: str
    old: bytes
    new: bytes

    @property
    def before(self) -> str:
        return file_hash(self.old)

    @property
    def after(self) -> str:
        return file_hash(self.new)


@dataclass
class ApplyResult:
    edits: list[FileEdit]
    dry_run: bool
    recovered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def diff(self) -> str:
        """The unified diff of the edits (rendered on demand: difflib is not free on 60 KB files)."""
        return _render_diff(self.edits)

    @property
    def methods(self) -> dict[str, str]:
        return {e.patch: e.method for e in self.edits}


@dataclass
class RevertResult:
    restored: list[str]
    saved_edits: dict[str, str] = field(default_factory=dict)
    already_pristine: list[str] = field(default_factory=list)


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
    state_dir = state_mod.state_dir(target.site_packages)
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


def _blocking(files: list[status_mod.FileStatus]) -> list[status_mod.FileStatus]:
    return [
        f for f in files if f.state in (status_mod.MODIFIED, status_mod.EDITED, status_mod.MISSING)
    ]


def _refuse_blocking(target: Target, files: list[status_mod.FileStatus]) -> None:
    bad = _blocking(files)
    if not bad:
        return
    names = ", ".join(str(target.path(f.path)) for f in bad)
    first = bad[0]
    if first.state == status_mod.EDITED:
        hint = "run `vllm-patcher revert --force` to restore pristine and keep your copy"
    elif first.state == status_mod.MISSING:
        hint = "reinstall vLLM"
    else:
        hint = (
            "undo the local edit or reinstall vLLM (pip install --force-reinstall --no-deps vllm=="
            f"{target.version}), then apply again"
        )
    raise LocallyModified(f"{names} differs from what pip installed; nothing was patched; {hint}")


def _compute_edits(
    target: Target,
    files: list[status_mod.FileStatus],
    pin: pinned.PinnedRelease | None,
    strict: bool,
    notes: list[str],
    contents: dict[str, bytes | None],
) -> list[FileEdit]:
    todo = [f for f in files if f.state in (status_mod.PENDING, status_mod.REINSTALLED)]
    by_patch: dict[str, list[status_mod.FileStatus]] = {}
    for f in todo:
        by_patch.setdefault(f.patch, []).append(f)
    edits = []
    changes = {c.path: c for p in catalog.PATCHES for c in p.changes}
    for patch, pfiles in by_patch.items():
        olds: dict[str, bytes] = {}
        for f in pfiles:
            data = contents.get(f.path)
            olds[f.path] = data if data is not None else target.path(f.path).read_bytes()
        use_pin = pin is not None and all(
            f.path in pin.files and pin.files[f.path].before == file_hash(olds[f.path])
            for f in pfiles
        )
        if use_pin:
            assert pin is not None
            per_file = pinned.split_by_file(pin.diff_text(patch), f"{pin.folder.name}/{patch}.diff")
            for f in pfiles:
                if f.path not in per_file:
                    raise StateError(
                        f"pinned diff {pin.folder.name}/{patch}.diff has no hunk for {f.path}"
                    )
                text = pinned.apply_exact(
                    olds[f.path].decode("utf-8"), per_file[f.path], f"{patch}.diff"
                )
                new = text.encode("utf-8")
                if file_hash(new) != pin.files[f.path].after:
                    raise StateError(
                        f"pinned diff {patch}.diff produced bytes for {f.path} that its manifest "
                        "does not list; reinstall vllm-patcher"
                    )
                edits.append(FileEdit(f.path, patch, "pinned-diff", olds[f.path], new))
            continue
        if strict:
            raise StateError(
                f"no pinned diff for {patch} matches vLLM {target.version} here; "
                "run without --strict to use the libcst transform"
            )
        if pin is None:
            notes.append(f"{patch}: vLLM {target.version} is not pinned; used the libcst transform")
        else:
            notes.append(
                f"{patch}: files differ from the pinned manifest; used the libcst transform"
            )
        for f in pfiles:
            try:
                source = olds[f.path].decode("utf-8")
            except UnicodeDecodeError:
                raise PatchShapeError(
                    f"{target.path(f.path)} is not UTF-8 text; refusing to rewrite it"
                ) from None
            result = changes[f.path].rewrite(source)
            if result.changed:
                edits.append(
                    FileEdit(
                        f.path, patch, "transform", olds[f.path], result.source.encode("utf-8")
                    )
                )
    return edits


def _render_diff(edits: list[FileEdit]) -> str:
    return "".join(
        pinned.make_diff(e.path, e.old.decode("utf-8"), e.new.decode("utf-8")) for e in edits
    )


def _recover(target: Target, record: PatchState) -> list[str]:
    """Bring every file named by an interrupted run's journal back to its pristine bytes."""
    restored = []
    for rel, fr in record.files.items():
        path = _check_inside_package(target, rel)
        data = status_mod.read_bytes(target, rel)
        cur = file_hash(data) if data is not None else None
        if cur == fr.before:
            continue
        if cur != fr.after:
            raise LocallyModified(
                f"{path} changed during an interrupted run and matches neither the pristine nor the "
                f"patched bytes; reinstall vLLM (pip install --force-reinstall --no-deps vllm=={target.version})"
            )
        _restore_pristine(target, rel, fr.before)
        restored.append(rel)
    _clear_state(target)
    return restored


def _restore_pristine(target: Target, rel: str, expected: str) -> None:
    copy = state_mod.pristine_path(target.site_packages, rel)
    try:
        data = copy.read_bytes()
    except OSError:
        raise StateError(
            f"the pristine copy of {rel} is missing; reinstall vLLM "
            f"(pip install --force-reinstall --no-deps vllm=={target.version})"
        ) from None
    if file_hash(data) != expected:
        raise StateError(
            f"the pristine copy of {rel} is corrupt; reinstall vLLM "
            f"(pip install --force-reinstall --no-deps vllm=={target.version})"
        )
    path = target.path(rel)
    state_mod.atomic_write(path, data, _mode_of(path))
    _drop_bytecode(path)


def _mode_of(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _clear_state(target: Target) -> None:
    directory = state_mod.state_dir(target.site_packages)
    (directory / "state.json").unlink(missing_ok=True)
    shutil.rmtree(directory / "pristine", ignore_errors=True)
    state_mod.fsync_dir(directory)


def apply(
    target: Target,
    *,
    dry_run: bool = False,
    strict: bool = False,
    pins_root: Path | None = None,
) -> ApplyResult:
    if catalog.classify(target.version) is Release.UPSTREAM:
        return ApplyResult([], dry_run, notes=[f"vLLM {target.version} already has every change"])
    pin = pinned.load(target.version, pins_root)
    record = state_mod.load(target.site_packages)
    if record is not None and record.phase != "applied" and dry_run:
        raise StateError(
            "an earlier run was interrupted; run `vllm-patcher apply` to recover first"
        )
    contents: dict[str, bytes | None] = {}
    files = status_mod.survey(target, record, pin, contents, detect_upstream=False)
    notes: list[str] = []
    interrupted = record is not None and record.phase != "applied"
    if not interrupted:  # an interrupted run's files are judged after recovery, under the lock
        _refuse_blocking(target, files)
    if not interrupted and not any(
        f.state in (status_mod.PENDING, status_mod.REINSTALLED) for f in files
    ):
        return ApplyResult([], dry_run)
    # Every new text is computed before anything is written, so a refusal leaves no trace.
    edits = _compute_edits(target, files, pin, strict, notes, contents) if not interrupted else []
    if dry_run:
        return ApplyResult(edits, True, notes=notes)

    rels = [f.path for f in files]
    for rel in rels:
        _check_inside_package(target, rel)
    _require_writable(target, rels)
    fresh_state_dir = not state_mod.state_dir(target.site_packages).exists()
    try:
        with state_mod.locked(target.site_packages):
            _sweep(target, rels)
            record = state_mod.load(target.site_packages)
            recovered: list[str] = []
            if record is not None and record.phase != "applied":
                recovered = _recover(target, record)
                record = None
            contents_again: dict[str, bytes | None] = {}
            survey_again = status_mod.survey(
                target, record, pin, contents_again, detect_upstream=False
            )
            _refuse_blocking(target, survey_again)
            if interrupted or _hashes(survey_again) != _hashes(files):
                notes = []
                edits = _compute_edits(target, survey_again, pin, strict, notes, contents_again)
            if edits:
                _commit(target, record, edits)
    except BaseException:
        with contextlib.suppress(PatcherError):
            if fresh_state_dir and state_mod.load(target.site_packages) is None:
                shutil.rmtree(state_mod.state_dir(target.site_packages), ignore_errors=True)
        raise
    return ApplyResult(edits, False, recovered=recovered, notes=notes)


def _sweep(target: Target, rels: list[str]) -> None:
    directory = state_mod.state_dir(target.site_packages)
    pristine = {state_mod.pristine_path(target.site_packages, rel).parent for rel in rels}
    folders = {target.path(rel).parent for rel in rels} | {directory} | pristine
    state_mod.sweep_temp_files(sorted(d for d in folders if d.is_dir()))


def _drop_orphans(target: Target) -> None:
    """A run killed before its journal was written may leave pristine copies or temp files."""
    directory = state_mod.state_dir(target.site_packages)
    pristine = directory / "pristine"
    if not pristine.exists() and not any(directory.glob(f".*{state_mod.TMP_SUFFIX}")):
        return
    with state_mod.locked(target.site_packages):
        if state_mod.load(target.site_packages) is None:
            shutil.rmtree(pristine, ignore_errors=True)
            state_mod.sweep_temp_files([directory])


def _hashes(files: list[status_mod.FileStatus]) -> list[tuple[str, str | None, str]]:
    return [(f.path, f.current, f.state) for f in files]


def _commit(target: Target, record: PatchState | None, edits: list[FileEdit]) -> None:
    site = target.site_packages
    new_record = PatchState(
        vllm_version=target.version,
        phase="applying",
        patches=dict(record.patches) if record else {},
        files=dict(record.files) if record else {},
    )
    for e in edits:
        copy = state_mod.pristine_path(site, e.path)
        state_mod.ensure_dir(copy.parent)
        state_mod.atomic_write(copy, e.old)
        new_record.files[e.path] = FileRecord(patch=e.patch, before=e.before, after=e.after)
        pr = new_record.patches.setdefault(e.patch, PatchRecord(method=e.method, files=[]))
        pr.method = e.method
        if e.path not in pr.files:
            pr.files.append(e.path)
    state_mod.save(site, new_record)
    try:
        for e in edits:
            path = target.path(e.path)
            state_mod.atomic_write(path, e.new, _mode_of(path))
        new_record.phase = "applied"
        state_mod.save(site, new_record)
    except BaseException:
        # Judge every file by its bytes, not by how far the loop got: an interrupt can land
        # after a replace and before the loop notices.
        if _roll_back(target, edits):
            if record is not None:
                state_mod.save(site, record)
            else:
                _clear_state(target)
        # otherwise the "applying" journal stays, and the next apply or revert recovers from it
        raise
    finally:
        for e in edits:
            _drop_bytecode(target.path(e.path))


def _roll_back(target: Target, edits: list[FileEdit]) -> bool:
    """Put the old bytes back wherever the new ones landed; True when every file is back."""
    clean = True
    for e in reversed(edits):
        path = target.path(e.path)
        try:
            current = file_hash(path.read_bytes())
            if current == e.after:
                state_mod.atomic_write(path, e.old, _mode_of(path))
            elif current != e.before:
                clean = False
        except (OSError, NotWritable):
            clean = False
    return clean


def revert(target: Target, *, force: bool = False) -> RevertResult:
    record = state_mod.load(target.site_packages)
    if record is None:
        _drop_orphans(target)
        return RevertResult([])
    rels = list(record.files)
    for rel in rels:
        _check_inside_package(target, rel)
    _require_writable(target, rels)
    with state_mod.locked(target.site_packages):
        _sweep(target, rels)
        record = state_mod.load(target.site_packages)
        if record is None:
            return RevertResult([])
        result = RevertResult([])
        plan: list[tuple[str, str]] = []
        edited: list[str] = []
        for rel, fr in record.files.items():
            data = status_mod.read_bytes(target, rel)
            cur = file_hash(data) if data is not None else None
            if cur == target.record.get(rel) or cur == fr.before:
                result.already_pristine.append(rel)
            elif cur == fr.after or data is None:  # a deleted file has nothing of the user's
                plan.append((rel, fr.before))
            else:
                edited.append(rel)
        if edited and not force:
            names = ", ".join(str(target.path(r)) for r in edited)
            raise LocallyModified(
                f"{names} changed after vllm-patcher applied it; nothing was reverted; "
                "run `vllm-patcher revert --force` to restore pristine and keep your copy"
            )
        for rel in edited:
            plan.append((rel, record.files[rel].before))
        for rel, before in plan:
            copy = state_mod.pristine_path(target.site_packages, rel)
            if not copy.is_file() or file_hash(copy.read_bytes()) != before:
                raise StateError(
                    f"the pristine copy of {rel} is missing or corrupt; nothing was reverted; reinstall vLLM "
                    f"(pip install --force-reinstall --no-deps vllm=={target.version})"
                )
        if edited:
            stamp = time.strftime("%Y%m%dT%H%M%S")
            for rel in edited:
                saved = state_mod.state_dir(target.site_packages) / "saved" / stamp / rel
                state_mod.ensure_dir(saved.parent)
                state_mod.atomic_write(saved, target.path(rel).read_bytes())
                result.saved_edits[rel] = str(saved)
        record.phase = "reverting"
        state_mod.save(target.site_packages, record)
        for rel, before in plan:
            _restore_pristine(target, rel, before)
            result.restored.append(rel)
        _clear_state(target)
        return result
