"""Bringing a target back from what an earlier run left: the files an interrupted transaction
names go back to pristine (``recover``), leftovers of a killed run go (``tidy``), and an edit
made over patched bytes is copied under ``saved/`` before it is written over."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from .. import fileops
from ..errors import LocallyModified, NotWritable, StateError
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from . import journal as journal_mod
from .files import (
    check_inside_package,
    read_pristine_copy,
    require_writable,
    roll_back,
    write_file,
)
from .journal import Journal
from .plan import FileEdit
from .survey import read_once


def tidy(target: Target, journal: Journal | None, rels: list[str]) -> None:
    """Remove what a killed run may have left: temp files, and pristine copies no record names
    (but the copy of a file that differs from it where RECORD vouches for the copy: the way back
    of a lost state record, which ``revert`` restores)."""
    root = target.site_packages
    directory = journal_mod.state_dir(root)
    pristine = journal_mod.pristine_dir(root)
    folders = {target.path(rel).parent for rel in rels} | {directory}
    if pristine.is_dir():
        named = set(journal.files) if journal is not None else set()
        for copy in [p for p in pristine.rglob("*") if p.is_file()]:
            rel = copy.relative_to(pristine).as_posix()
            if rel not in named and not _way_back(target, rel, copy):
                with contextlib.suppress(OSError):
                    copy.unlink()
            folders.add(copy.parent)
        fileops.prune_empty_dirs(pristine)
    fileops.sweep_temp_files(sorted(d for d in folders if d.is_dir()))


def _way_back(target: Target, rel: str, copy: Path) -> bool:
    """An unrecorded copy that RECORD vouches for, of a file that now differs from it."""
    if target.reference != RECORD_REFERENCE or rel not in target.record:
        return False
    try:
        data = copy.read_bytes()
        path = target.path(rel)
        differs = not path.is_file() or path.read_bytes() != data
    except OSError:
        return False
    return differs and file_hash(data) == target.record[rel]


def recover(
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
        path = check_inside_package(target, rel)
        data = read_once(target, rel, contents)
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
        plan.append((rel, read_pristine_copy(target, rel, fr.before, fr.after)))
    saved = save_edits(target, edited, contents)
    if kept is not None:
        kept.update(saved)
    # Written back as a whole or not at all: a run stopped part-way puts back what it wrote (the
    # unfinished journal stays, for the next run) and drops the copies whose edits are back.
    written: list[FileEdit] = []
    absent = tuple(rel for rel, _ in plan if contents[rel] is None)
    try:
        for rel, data in plan:
            written.append(FileEdit(rel, contents[rel] or b"", data, (), "recover"))
            write_file(target, rel, data)
    except BaseException:
        roll_back(target, written, to_before=True, absent=absent)
        drop_copies_if_in_place(target, saved, contents)
        raise
    for rel, data in plan:
        contents[rel] = data
    journal_mod.clear(target.site_packages, list(journal.files))
    return [rel for rel, _ in plan]


def drop_copies_if_in_place(
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
            fileops.discard_tree(folder)
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


def save_edits(
    target: Target, edited: list[str], contents: dict[str, bytes | None]
) -> dict[str, str]:
    """Copy each edited file's bytes to a new folder under saved/; where each went."""
    saved: dict[str, str] = {}
    if not edited:
        return saved
    folder = _new_saved_folder(journal_mod.saved_dir(target.site_packages))
    try:
        for rel in edited:
            dest = folder / rel
            fileops.ensure_dir(dest.parent)
            fileops.atomic_write(dest, contents[rel] or b"")
            saved[rel] = str(dest)
    except BaseException:  # nothing restored yet: the edits are still in place, drop the part
        fileops.discard_tree(folder)
        raise
    return saved


def restore_unrecorded(target: Target, force: bool) -> tuple[list[str], dict[str, str]]:
    """With no state record: each file whose kept pristine copy differs from it goes back to that
    copy, once the installer's RECORD vouches for every such copy (the record was lost while the
    files stayed patched). No record tells the tool's change from an edit of the user's, so only
    with ``force``, each current file kept under saved/ first. A copy of a file the run never
    changed (a run killed before its record was written) restores nothing. Refused, nothing
    changed, where RECORD cannot vouch or a copy is a link. The files restored, and where each
    current file was kept."""
    pristine = journal_mod.pristine_dir(target.site_packages)
    if not pristine.is_dir():
        return [], {}
    back: dict[str, bytes] = {}
    current: dict[str, bytes | None] = {}
    for copy in sorted(p for p in pristine.rglob("*") if p.is_file() or p.is_symlink()):
        rel = copy.relative_to(pristine).as_posix()
        if any(q.is_symlink() for q in (copy, *copy.parents) if pristine in q.parents):
            raise StateError(
                f"the kept pristine copy {copy} is a link; nothing was changed; "
                f"{target.reinstall_hint}"
            )
        data = copy.read_bytes()
        path = target.path(rel)
        now = path.read_bytes() if path.is_file() else None
        if now == data:
            continue
        installed = target.record.get(rel) if target.reference == RECORD_REFERENCE else None
        if installed != file_hash(data):
            raise StateError(
                f"the state record is missing and {path} differs from its kept pristine copy, "
                f"which the installer's RECORD does not vouch for; nothing was changed; "
                f"{target.reinstall_hint}"
            )
        back[rel], current[rel] = data, now
    if back and not force:
        raise LocallyModified(
            f"the state record is missing and {len(back)} file(s) differ from their kept "
            f"pristine copies (first {target.path(sorted(back)[0])}): no record tells the "
            "patches from your edits; nothing was changed; run "
            f"`{target.command('revert --force')}` to restore them, each current file kept first"
        )
    for rel in back:
        check_inside_package(target, rel)
    require_writable(target, list(back))
    saved = save_edits(target, [r for r in back if current[r] is not None], current)
    for rel, data in back.items():
        write_file(target, rel, data)
    return sorted(back), saved
