"""Committing a plan to the target, as a transaction: all files change or none do.

An apply stores the pristine bytes, writes the journal with phase ``applying``, replaces each
file atomically and marks the journal ``applied``. A revert writes phase ``reverting`` first and
removes the journal last. Any failure or Ctrl-C puts every file back by its bytes (and the
journal as it was); a kill leaves the journal, and the next run recovers from it
(``recovery``)."""

from __future__ import annotations

import contextlib

from .. import fileops
from ..errors import PatcherError
from ..install.target import Target
from . import journal as journal_mod
from .files import roll_back, write_file
from .journal import FileRecord, Journal, PatchRecord, Phase
from .plan import FileEdit, RevertPlan
from .states import patch_method


def commit_apply(target: Target, old: Journal | None, edits: list[FileEdit]) -> Journal:
    root = target.site_packages
    new = Journal(
        vllm_version=target.version,
        phase=Phase.APPLYING,
        patches={k: PatchRecord(v.method, list(v.files)) for k, v in old.patches.items()}
        if old
        else {},
        files=dict(old.files) if old else {},
    )
    made: dict[str, list[str]] = {}  # each patch this run applies: its files' methods
    for e in edits:
        was = e.before_hash if e.base is not None else None
        earlier = old.files[e.path].patches if old and e.path in old.files and was else []
        new.files[e.path] = FileRecord(
            list(e.patches), e.pristine_hash, e.after_hash, was, e.producer
        )
        for patch in earlier:
            rec = new.patches.get(patch)
            if patch not in e.patches and rec is not None and e.path in rec.files:
                # its current version no longer changes this file
                rec.files = [f for f in rec.files if f != e.path]
        for patch in e.patches:
            rec = new.patches.setdefault(patch, PatchRecord(method=e.method, files=[]))
            if patch not in earlier:  # patches stacked on keep the method they were applied by
                made.setdefault(patch, []).append(e.method)
                rec.method = patch_method(made[patch]) or e.method
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
            write_file(target, e.path, e.after)
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
        if roll_back(target, written, to_before=True):
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


def commit_revert(target: Target, journal: Journal, plan: RevertPlan) -> None:
    root = target.site_packages
    journal.phase = Phase.REVERTING
    try:
        journal_mod.save(root, journal)
        for e in plan.edits:
            write_file(target, e.path, e.after)
    except BaseException:
        journal.phase = Phase.APPLIED
        if roll_back(target, plan.edits, to_before=True, absent=tuple(plan.absent)):
            with contextlib.suppress(PatcherError, OSError):
                journal_mod.save(root, journal)
        # otherwise the "reverting" journal stays, and the next run finishes the revert
        raise
    # Every file is pristine now. If forgetting the record fails, the "reverting" journal names
    # only pristine files, and the next run completes the clean-up; the revert itself happened.
    with contextlib.suppress(PatcherError, OSError):
        journal_mod.clear(root, list(journal.files))
