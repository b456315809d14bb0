"""Planning: which bytes each file gets. No I/O on the target: the bytes come from the survey.

A plan is a list of ``FileEdit``: one file, its bytes before and after, and the patches that make
the difference (in series order, so several patches can share one file). Committing a plan is
``txn``'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import catalog, pinned
from .errors import LocallyModified, PatchShapeError, StateError, StrictRefusal
from .journal import Journal
from .status import TODO, FileState, FileStatus
from .target import Target, file_hash

PINNED_DIFF, TRANSFORM = "pinned-diff", "transform"


@dataclass(frozen=True)
class FileEdit:
    """A file, its bytes before and after, and the patches that turn the one into the other."""

    path: str
    before: bytes
    after: bytes
    patches: tuple[str, ...]
    method: str
    adopted: bool = False  # the ``after`` bytes are already on disk (applied by hand)

    @property
    def before_hash(self) -> str:
        return file_hash(self.before)

    @property
    def after_hash(self) -> str:
        return file_hash(self.after)


def refuse_blocking(target: Target, files: list[FileStatus]) -> None:
    bad = [f for f in files if f.state in (FileState.MODIFIED, FileState.EDITED, FileState.MISSING)]
    if not bad:
        return
    names = ", ".join(str(target.path(f.path)) for f in bad)
    first = bad[0]
    if first.state is FileState.EDITED:
        raise LocallyModified(
            f"{names} changed after vllm-patcher applied it; nothing was patched; run "
            f"`{target.command('revert --force')}` to restore pristine and keep your copy"
        )
    if first.state is FileState.MISSING:
        raise LocallyModified(
            f"{names} is missing; nothing was patched; reinstall vLLM ({target.reinstall_hint})"
        )
    hint = f"undo the local edit ({target.reinstall_hint}), then apply again"
    raise LocallyModified(
        f"{names} differs from {target.pristine_phrase}; nothing was patched; {hint}"
    )


def plan_apply(
    target: Target,
    files: list[FileStatus],
    contents: dict[str, bytes | None],
    pin: pinned.PinnedRelease | None,
    strict: bool,
    notes: list[str],
) -> list[FileEdit]:
    """The edits that bring every pending file to its patched bytes and adopt unrecorded ones."""
    refuse_blocking(target, files)
    by_patch: dict[str, list[FileStatus]] = {}
    for f in files:
        if f.state in TODO or f.state is FileState.UNRECORDED:
            by_patch.setdefault(f.patch, []).append(f)
    changes = {c.path: c for p in catalog.PATCHES for c in p.changes}
    edits: list[FileEdit] = []
    for patch, pfiles in by_patch.items():
        olds = {f.path: _bytes(contents, f.path) for f in pfiles}
        todo = [f for f in pfiles if f.state is not FileState.UNRECORDED]
        adopt = [f for f in pfiles if f.state is FileState.UNRECORDED]
        use_pin = pin is not None and all(
            f.path in pin.files and pin.files[f.path].before == file_hash(olds[f.path])
            for f in todo
        )
        per_file: dict[str, str] = {}
        if pin is not None and (adopt or (use_pin and todo)):
            per_file = pinned.split_by_file(pin.diff_text(patch), f"{pin.folder.name}/{patch}.diff")
        for f in adopt:
            assert pin is not None  # unrecorded means "equals the pinned result"
            before = _reverse(pin, per_file, patch, f.path, olds[f.path])
            if file_hash(before) != target.record.get(f.path):
                raise LocallyModified(
                    f"{target.path(f.path)} has the pinned result, but taking the pinned diff "
                    f"back out does not give the pristine bytes; {target.reinstall_hint}"
                )
            edits.append(FileEdit(f.path, before, olds[f.path], (patch,), PINNED_DIFF, True))
        if not todo:
            continue
        if use_pin:
            assert pin is not None
            for f in todo:
                edits.append(_pinned_edit(pin, per_file, patch, f.path, olds[f.path]))
            continue
        if strict:
            raise StrictRefusal(
                f"no pinned diff for {patch} matches vLLM {target.version} here; "
                "run without --strict to use the libcst transform"
            )
        if pin is None:
            notes.append(f"{patch}: vLLM {target.version} is not pinned; used the libcst transform")
        else:
            notes.append(
                f"{patch}: files differ from the pinned manifest; used the libcst transform"
            )
        for f in todo:
            try:
                source = olds[f.path].decode("utf-8")
            except UnicodeDecodeError:
                raise PatchShapeError(
                    f"{target.path(f.path)} is not UTF-8 text; refusing to rewrite it"
                ) from None
            result = changes[f.path].rewrite(source)
            if result.changed:
                new = result.source.encode("utf-8")
                edits.append(FileEdit(f.path, olds[f.path], new, (patch,), TRANSFORM))
    return edits


def _bytes(contents: dict[str, bytes | None], rel: str) -> bytes:
    data = contents.get(rel)
    assert data is not None, f"{rel} was judged present but not read"
    return data


def _pinned_edit(
    pin: pinned.PinnedRelease, per_file: dict[str, str], patch: str, rel: str, old: bytes
) -> FileEdit:
    if rel not in per_file:
        raise StateError(f"pinned diff {pin.folder.name}/{patch}.diff has no hunk for {rel}")
    new = pinned.apply_exact(old.decode("utf-8"), per_file[rel], f"{patch}.diff").encode("utf-8")
    if file_hash(new) != pin.files[rel].after:
        raise StateError(
            f"pinned diff {patch}.diff produced bytes for {rel} that its manifest "
            "does not list; reinstall vllm-patcher"
        )
    return FileEdit(rel, old, new, (patch,), PINNED_DIFF)


def _reverse(
    pin: pinned.PinnedRelease, per_file: dict[str, str], patch: str, rel: str, current: bytes
) -> bytes:
    if rel not in per_file:
        raise StateError(f"pinned diff {pin.folder.name}/{patch}.diff has no hunk for {rel}")
    text = pinned.apply_exact(current.decode("utf-8"), per_file[rel], f"{patch}.diff", True)
    before = text.encode("utf-8")
    if file_hash(before) != pin.files[rel].before:
        raise StateError(
            f"taking {patch}.diff back out of {rel} does not give the bytes its manifest lists"
        )
    return before


@dataclass
class RevertPlan:
    edits: list[FileEdit]  # before = the bytes on disk now, after = the pristine bytes
    already_pristine: list[str]
    edited: list[str]  # changed after apply (only restored with --force)
    absent: list[str]  # deleted since apply: restored, and deleted again on a roll back


def plan_revert(
    journal: Journal,
    contents: dict[str, bytes | None],
    pristine_copy: Callable[[str, str], bytes],
) -> RevertPlan:
    """Decide per file by the tool's own record: pristine only when it equals the recorded before.

    ``pristine_copy(rel, before_hash)`` returns the checked pristine bytes of a file to restore.
    """
    plan = RevertPlan([], [], [], [])
    for rel, fr in journal.files.items():
        data = contents.get(rel)
        cur = file_hash(data) if data is not None else None
        if cur == fr.before:
            plan.already_pristine.append(rel)
            continue
        if cur is not None and cur != fr.after:
            plan.edited.append(rel)
        if data is None:
            plan.absent.append(rel)
        record = journal.patches.get(fr.patches[0]) if fr.patches else None
        method = record.method if record is not None else ""
        pristine = pristine_copy(rel, fr.before)
        plan.edits.append(FileEdit(rel, data or b"", pristine, tuple(fr.patches), method))
    return plan
