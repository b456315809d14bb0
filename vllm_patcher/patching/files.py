"""The target's files, written safely: never through a link out of the vLLM package, never in
a directory the run cannot write, each replaced atomically with its stale bytecode dropped; the
kept pristine copies read back only when they still match the record; and a roll back that puts
every file back by its bytes."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .. import fileops
from ..errors import LocallyModified, NotWritable, PatcherError, StateError
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from . import journal as journal_mod
from .plan import FileEdit


def check_inside_package(target: Target, rel: str) -> Path:
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


def require_writable(target: Target, rels: list[str]) -> None:
    dirs = {target.site_packages} | {target.path(rel).parent for rel in rels}
    state_dir = journal_mod.state_dir(target.site_packages)
    if state_dir.exists():
        dirs.add(state_dir)
    for d in sorted(dirs):
        if not d.is_dir():  # a folder of the package gone: not a permission matter
            raise LocallyModified(f"{d} is missing; nothing was changed; {target.reinstall_hint}")
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


def write_file(target: Target, rel: str, data: bytes) -> None:
    path = target.path(rel)
    fileops.atomic_write(path, data, _mode_of(path))
    _drop_bytecode(path)


def check_record(target: Target, rel: str, before: str, after: str | None) -> None:
    """Refuse a recorded pristine hash of ``rel`` that the installer's RECORD contradicts (it
    lists neither it nor the patched bytes): the state record or its copy was changed by hand."""
    hint = target.reinstall_hint
    installed = target.record.get(rel) if target.reference == RECORD_REFERENCE else None
    if installed is not None and installed not in (before, after):
        raise StateError(
            f"the pristine copy of {rel} in {journal_mod.state_dir(target.site_packages)} does "
            f"not match vLLM {target.version}'s RECORD; nothing was changed; {hint}, then "
            f"remove {journal_mod.state_dir(target.site_packages)}"
        )


def read_pristine_copy(target: Target, rel: str, expected: str, after: str | None = None) -> bytes:
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
    check_record(target, rel, expected, after)
    return data


def roll_back(
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
                    write_file(target, e.path, want)
            elif current != want and not (e.path in absent and current is None):
                clean = False
        except (OSError, PatcherError):
            clean = False
    return clean
