"""Planning: which bytes each file gets. No I/O on the target: the bytes come from the survey.

A plan is a list of ``FileEdit``: one file, its bytes before and after, and the patches that make
the difference (in series order, so several patches can share one file). Committing a plan is
``txn``'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..catalogue.layout import Layout, Step, Verdict, builds_on
from ..catalogue.model import Catalogue
from ..diffs import pinned
from ..errors import (
    LocallyModified,
    PatchFolderError,
    PatchShapeError,
    PatchUnavailable,
    StateError,
    StrictRefusal,
)
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from .journal import FileRecord, Journal
from .states import PINNED_DIFF, TODO, TRANSFORM, FileState, FileStatus
from .survey import outdated, pinned_end, producer


class FileEdit(NamedTuple):
    """A file, its bytes before and after, and the patches that turn the one into the other."""

    path: str
    before: bytes
    after: bytes
    patches: tuple[str, ...]
    method: str
    adopted: bool = False  # the ``after`` bytes are already on disk (applied by hand)
    base: str | None = None  # the pristine hash when ``before`` already carries patches
    added: tuple[str, ...] | None = None  # the patches this edit adds (None: all of them)
    producer: str | None = None  # the codemods that made ``after`` (a transform edit)

    @property
    def new_patches(self) -> tuple[str, ...]:
        return self.patches if self.added is None else self.added

    @property
    def pristine_hash(self) -> str:
        return self.base if self.base is not None else self.before_hash

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
    listed = target.reference == RECORD_REFERENCE  # the installer's RECORD: every file it put
    foreign = [
        f for f in bad if f.state is FileState.MISSING and listed and f.path not in target.record
    ]
    if foreign:  # no install of this release has it: the patch names a file of another
        f = foreign[0]
        raise PatchFolderError(
            f"{f.patch} changes {f.path}, which vLLM {target.version} does not install; nothing "
            f"was patched; port it to this release's files "
            f"(`vllm-patcher port {f.patch} --to {target.version}`) or narrow its releases"
        )
    names = ", ".join(dict.fromkeys(str(target.path(f.path)) for f in bad))
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
    journal: Journal | None,
    lay: Layout,
    files: list[FileStatus],
    contents: dict[str, bytes | None],
    pristine_copy: Callable[[str, str], bytes],
    strict: bool,
    notes: list[str],
) -> list[FileEdit]:
    """The edits that bring every file to the end of its series, and adopt unrecorded ones.

    A file already carrying a prefix of its series, as the patches given now make it, gets the
    rest stacked on its current bytes; otherwise (an outdated file among them) the series is
    replayed from the pristine bytes. A file that only an earlier version of a patch changed
    goes back to pristine.
    """
    refuse_blocking(target, files)
    _refuse_or_skip_unported(target, lay, notes)
    runner = _Runner(target, lay.catalogue, strict, notes, set())
    by_file: dict[str, list[FileStatus]] = {}
    for f in files:
        by_file.setdefault(f.path, []).append(f)
    edits: list[FileEdit] = []
    for rel, steps in lay.steps.items():
        names = {s.patch for s in steps}
        # a patch recorded on the file whose current version no longer changes it counts too
        states = {
            f.state
            for f in by_file.get(rel, [])
            if f.patch in names or f.state is FileState.OUTDATED
        }
        if not states & {*TODO, FileState.UNRECORDED, FileState.OUTDATED}:
            continue
        current = _bytes(contents, rel)
        ours = journal.files.get(rel) if journal is not None else None
        if states == {FileState.UNRECORDED}:
            edits.append(_adopt(target, rel, steps, current))
        elif ours is not None and file_hash(current) == ours.after:
            edits.append(_over_recorded(runner, lay, rel, steps, current, ours, pristine_copy))
        else:
            after, how = runner.run(rel, steps, current)
            if after != current:
                edits.append(FileEdit(rel, current, after, tuple(s.patch for s in steps), how))
    edits.extend(_back_to_pristine(journal, lay, files, contents, pristine_copy))
    return [
        e._replace(producer=producer(lay.steps[e.path], target.version))
        if e.method == TRANSFORM and e.path in lay.steps
        else e
        for e in edits
    ]


class _Runner(NamedTuple):
    """What running a file's steps needs besides the file, one per plan (``transformed``: the
    patches already noted as run by their transform)."""

    target: Target
    catalogue: Catalogue
    strict: bool
    notes: list[str]
    transformed: set[str]

    def run(self, rel: str, steps: list[Step], start: bytes) -> tuple[bytes, str]:
        return run_steps(
            self.target,
            rel,
            steps,
            start,
            self.strict,
            self.notes,
            self.transformed,
            self.catalogue,
        )


def _refuse_or_skip_unported(target: Target, lay: Layout, notes: list[str]) -> None:
    """A selected patch with no diff for this release: refused when the run names patches,
    else skipped with a note that says how to port it."""
    unported = [
        n for n, v in lay.verdicts.items() if v is Verdict.UNPORTED and lay.catalogue.is_selected(n)
    ]
    if unported and lay.catalogue.selected:
        name = unported[0]
        raise PatchUnavailable(
            f"{name} has no diff for vLLM {target.version}; nothing was patched; "
            f"{_unported_fix(lay, name, target.version)} first"
        )
    for name in unported:
        notes.append(
            f"{name}: no diff for vLLM {target.version}, skipped "
            f"({_unported_fix(lay, name, target.version)})"
        )


def _over_recorded(
    runner: _Runner,
    lay: Layout,
    rel: str,
    steps: list[Step],
    current: bytes,
    ours: FileRecord,
    pristine_copy: Callable[[str, str], bytes],
) -> FileEdit:
    """A file holding the bytes the journal recorded: the rest of its series stacked on them
    when the recorded patches are its first steps as the patches given now make them; else the
    whole series replayed from the kept pristine bytes."""
    wanted = [s.patch for s in steps]
    done = ours.patches
    stale = outdated(runner.target, lay.catalogue, rel, steps, ours) is not None
    if wanted[: len(done)] == done and not stale:
        rest = steps[len(done) :]
        after, how = runner.run(rel, rest, current)
        added = tuple(s.patch for s in rest)
        return FileEdit(rel, current, after, tuple(wanted), how, base=ours.before, added=added)
    missing = [n for n in done if n not in wanted and not _dropped(lay, n)]
    if missing:
        raise StateError(
            f"{rel} carries {missing[0]}, whose patch folder was not given, and the "
            "series on it changed; nothing was patched; give its folder with --patches, "
            f"or run `{runner.target.command('revert')}` first"
        )
    after, how = runner.run(rel, steps, pristine_copy(rel, ours.before))
    added = tuple(wanted) if stale else tuple(n for n in wanted if n not in done)
    return FileEdit(rel, current, after, tuple(wanted), how, base=ours.before, added=added)


def _back_to_pristine(
    journal: Journal | None,
    lay: Layout,
    files: list[FileStatus],
    contents: dict[str, bytes | None],
    pristine_copy: Callable[[str, str], bytes],
) -> list[FileEdit]:
    """The outdated files no patch given now changes (only an earlier version of one did):
    back to their pristine bytes."""
    edits: list[FileEdit] = []
    for rel in dict.fromkeys(f.path for f in files if f.state is FileState.OUTDATED):
        if rel in lay.steps or journal is None or rel not in journal.files:
            continue
        ours = journal.files[rel]
        pristine = pristine_copy(rel, ours.before)
        edits.append(
            FileEdit(rel, _bytes(contents, rel), pristine, (), PINNED_DIFF, base=ours.before)
        )
    return edits


def _dropped(lay: Layout, name: str) -> bool:
    """A patch given this run (applicable here) whose current version no longer changes a file
    an earlier version of it did: replaying the file's series without it is its current result."""
    return lay.verdicts.get(name) is Verdict.APPLICABLE


def _unported_fix(lay: Layout, name: str, version: str) -> str:
    patch = lay.catalogue.get(name)
    if patch is None:
        return f"run `vllm-patcher port {name} --to {version}`"
    return patch.unported_fix(version)


def _bytes(contents: dict[str, bytes | None], rel: str) -> bytes:
    data = contents.get(rel)
    assert data is not None, f"{rel} was judged present but not read"
    return data


def run_steps(
    target: Target,
    rel: str,
    steps: list[Step],
    start: bytes,
    strict: bool,
    notes: list[str],
    transformed: set[str],
    catalogue: Catalogue | None = None,
) -> tuple[bytes, str]:
    """Run ``steps`` over ``start``: pinned diffs when the hashes chain, else the transforms.
    ``catalogue`` (the whole one, its selection marked) lets a refusal name the unselected
    patches a diff is stacked on."""
    if pinned_end(steps, file_hash(start)) is not None:
        text = start.decode("utf-8")
        for step in steps:
            assert step.pin is not None and step.pinned is not None
            text = pinned.apply_exact(text, step.pin.per_file[rel], step.pin.where)
            if file_hash(text.encode("utf-8")) != step.pinned.after:
                raise PatchFolderError(
                    f"{step.pin.where} produced bytes for {rel} that its manifest does not list; "
                    "the manifest does not match its diff"
                )
        return text.encode("utf-8"), PINNED_DIFF
    stranger = next((s for s in steps if s.transform is None), None)
    if stranger is not None:
        raise PatchFolderError(_no_chain_message(target, rel, steps, start, stranger, catalogue))
    below = _stacked_on(target, steps, catalogue)
    if strict:
        under = f" (its pinned diff is stacked on {', '.join(below)}, not chosen)" if below else ""
        raise StrictRefusal(
            f"no pinned diff for {', '.join(s.patch for s in steps)} matches {rel} of vLLM "
            f"{target.version} here{under}; run without --strict to use the libcst transform"
        )
    from ..transforms import codemod  # the codemods load only when a file goes through one

    try:
        text = start.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchShapeError(
            f"{target.path(rel)} is not UTF-8 text; refusing to rewrite it"
        ) from None
    for step in steps:
        assert step.transform is not None
        if step.patch not in transformed:
            transformed.add(step.patch)
            if step.pin is None:
                why = f"vLLM {target.version} is not pinned"
            elif below:  # a clean file: the pin was made over patches this run did not choose
                why = (
                    f"its pinned diff for {rel} is stacked on {', '.join(below)}, not chosen "
                    "(the transform makes the same change alone)"
                )
            else:
                why = f"vLLM {target.version} differs from the pinned manifest"
            notes.append(f"{step.patch}: {why}; used the libcst transform")
        text = codemod.rewrite(step.transform, text, target.version).source
    return text.encode("utf-8"), TRANSFORM


def _stacked_on(target: Target, steps: list[Step], catalogue: Catalogue | None) -> list[str]:
    """The unchosen patches the pinned diffs of ``steps`` are stacked on (none: not the reason
    they do not chain)."""
    if catalogue is None:
        return []
    names = [s.patch for s in steps]
    return [
        n
        for n in builds_on(catalogue, target.version, target.record, names)
        if n not in names and catalogue.selected and not catalogue.is_selected(n)
    ]


def _no_chain_message(
    target: Target,
    rel: str,
    steps: list[Step],
    start: bytes,
    step: Step,
    catalogue: Catalogue | None = None,
) -> str:
    """Name the first step whose diff was made for other bytes than the ones before it, and the
    unselected patches it is stacked on, with the apply that selects them too."""
    running: str | None = file_hash(start)
    before: list[str] = []
    for s in steps:
        if s.pinned is None or s.pinned.before != running:
            step = s
            break
        running, before = s.pinned.after, [*before, s.patch]
    made_on = f"what {', '.join(before)} produce" if before else "the pristine file"
    if step.pinned is None:
        return (
            f"{step.patch} has no diff for {rel} of vLLM {target.version} and no transform; "
            f"nothing was patched; run `vllm-patcher port {step.patch} --to {target.version}` "
            "(with the --patches folder that holds it)"
        )
    in_series = {s.patch for s in steps}
    missing = [
        n
        for n in (
            builds_on(catalogue, target.version, target.record, [step.patch]) if catalogue else []
        )
        if n not in in_series
    ]
    if catalogue is not None and missing:
        selected = [n for n in catalogue.names if n in catalogue.selected or n in in_series]
        names = " ".join(n for n in catalogue.names if n in {*missing, *selected})
        patch = catalogue.get(step.patch)
        command = target.command(patch.args(f"apply {names}") if patch else f"apply {names}")
        return (
            f"{step.patch}'s diff for {rel} is stacked on {', '.join(missing)}, not selected "
            f"in this run; nothing was patched; select {'it' if len(missing) == 1 else 'them'} "
            f"too: `{command}`"
        )
    return (
        f"{step.patch}'s diff for {rel} was made on other bytes than {made_on} here (a patch "
        "it was stacked on is not selected, or the file differs from the release); nothing was "
        "patched; select the patches it builds on, or capture it again"
    )


def _adopt(target: Target, rel: str, steps: list[Step], current: bytes) -> FileEdit:
    """A file with the pinned result but no record: take the series back out to prove it."""
    text = current.decode("utf-8")
    for step in reversed(steps):
        assert step.pin is not None
        text = pinned.apply_exact(text, step.pin.per_file[rel], step.pin.where, reverse=True)
    before = text.encode("utf-8")
    if file_hash(before) != target.record.get(rel):
        raise LocallyModified(
            f"{target.path(rel)} has the pinned result, but taking the pinned diffs back out "
            f"does not give the pristine bytes; {target.reinstall_hint}"
        )
    return FileEdit(rel, before, current, tuple(s.patch for s in steps), PINNED_DIFF, True)


class RevertPlan(NamedTuple):
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
