"""Judging each touched file of one target from its bytes, the reference hashes (the
installer's RECORD, or the pinned manifest for a source tree) and the tool's journal.

Reading is one pass: ``survey`` reads every touched file once and keeps the bytes in a
``contents`` dict, so the transaction plans from exactly what was judged. A pinned release never
imports libcst here; only an unpinned release asks the transform whether a change is already
there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .. import fileops
from ..catalogue.folders import patches_args
from ..catalogue.layout import Layout, Step, Verdict
from ..catalogue.model import Catalogue, FileChange
from ..errors import PatchShapeError
from ..install.record import file_hash
from ..install.target import RECORD_REFERENCE, Target
from . import journal as journal_mod
from .states import PINNED_DIFF, TRANSFORM, FileState, FileStatus


def read_once(target: Target, rel: str, contents: dict[str, bytes | None]) -> bytes | None:
    """The bytes of ``rel``, read at most once per command (kept in ``contents``)."""
    if rel not in contents:
        contents[rel] = fileops.read_or_none(target.path(rel))
    return contents[rel]


def survey(
    target: Target,
    journal: journal_mod.Journal | None,
    lay: Layout,
    contents: dict[str, bytes | None],
    detect_upstream: bool = True,
) -> list[FileStatus]:
    """One FileStatus per (file, patch) of the layout's series, plus the journal's other patches.

    With ``detect_upstream`` false, a pristine file of an unpinned release is ``pending`` without
    running its transform (apply runs it anyway and skips a file the transform leaves unchanged).
    """
    files = []
    for rel, steps in lay.steps.items():
        data = read_once(target, rel, contents)
        end = pinned_end(steps, target.record.get(rel))
        methods = step_methods(steps, target.record.get(rel))
        ours = journal.files.get(rel) if journal is not None and journal.finished else None
        stale = outdated(target, lay.catalogue, rel, steps, ours) if ours is not None else None
        for step, method in zip(steps, methods, strict=True):
            fs = _judge_file(target, journal, contents, step, end, method, detect_upstream, data)
            if fs.state is FileState.UNRECORDED:
                fs.detail += f"; `{apply_command(target, lay.catalogue, [step.patch])}` adopts it"
            files.append(_outdate(target, lay.catalogue, fs, journal, stale))
    if journal is not None:
        seen = {(f.path, f.patch) for f in files}
        for rel, fr in journal.files.items():
            for name in fr.patches:
                if (rel, name) not in seen:
                    data = read_once(target, rel, contents)
                    files.append(_judge_recorded(target, journal, lay, rel, name, data))
    return files


def step_methods(steps: list[Step], reference: str | None) -> list[str | None]:
    """The method apply uses for each step of one file's series: the pinned diffs when they
    chain from ``reference``, else the transforms when every step has one; when neither (apply
    refuses), each step's own: its pin for the release, else its transform."""
    if pinned_end(steps, reference) is not None:
        return [PINNED_DIFF] * len(steps)
    if all(s.transform is not None for s in steps):
        return [TRANSFORM] * len(steps)
    return [
        PINNED_DIFF if s.pinned is not None else (TRANSFORM if s.transform else None) for s in steps
    ]


def outdated(
    target: Target, catalogue: Catalogue, rel: str, steps: list[Step], ours: journal_mod.FileRecord
) -> str | None:
    """Why the recorded result of ``rel`` is not what the patches given now produce from its
    pristine bytes, or None when it is (or cannot be told without running a transform).

    Only a series whose recorded patches are the first steps of the one given now is judged
    here; another shape (a folder not given, a changed order) is the plan's to refuse or replay.
    """
    done = ours.patches
    prefix = steps[: len(done)]
    if not done or [s.patch for s in prefix] != done:
        return None
    running = ours.before
    for i, step in enumerate(prefix):
        if step.pinned is None or step.pinned.before != running:
            if all(s.transform is not None for s in prefix):
                return _outdated_output(target, catalogue, rel, prefix, ours)
            if i == 0:
                return (
                    f"{rel} was patched by {', '.join(done)} from other bytes than the ones "
                    f"{step.patch}'s diff for it is made on; run `{target.command('revert')}`, "
                    f"then `{apply_command(target, catalogue, done)}`"
                )
            return (
                f"{rel} holds what an earlier version of the patches on it produced "
                f"({', '.join(done)}), and {step.patch}'s diff for it is now made on other bytes "
                "than the patches before it leave; capture or port it again"
            )
        running = step.pinned.after
    if running == ours.after:
        return None
    # The journal keeps the file's end bytes only: the last patch's diff changed for certain
    # (its own result differs), the earlier ones may have.
    return (
        f"{rel} holds what an earlier version of the patches on it produced ({', '.join(done)}; "
        f"at least {done[-1]} changed since it was applied); "
        f"`{apply_command(target, catalogue, done)}` brings the current version"
    )


def producer(steps: Sequence[Step], version: str) -> str:
    """What makes a file's bytes when ``steps`` run as codemods on ``version``: the codemods'
    code (``transforms.cache.source_digest``), each step's transform and family description, and
    the release. Another tool version whose codemods differ gives another producer."""
    from ..transforms.cache import source_digest

    h = hashlib.sha256(source_digest().encode())
    for s in steps:
        assert s.transform is not None
        h.update(f"\0{s.patch}\0{s.transform.transform}\0{s.transform.family!r}".encode())
    h.update(f"\0{version}".encode())
    return "sha256:" + h.hexdigest()[:32]


def _outdated_output(
    target: Target, catalogue: Catalogue, rel: str, steps: list[Step], ours: journal_mod.FileRecord
) -> str | None:
    """Why the codemods' recorded output of ``rel`` is not what the codemods of this tool make
    from its kept pristine bytes, or None when it is. The same producer is the same output and
    nothing runs; another (a tool upgrade, or a record without one) runs the codemods once."""
    if ours.producer is not None and ours.producer == producer(steps, target.version):
        return None
    done = ", ".join(s.patch for s in steps)
    fix = f"`{apply_command(target, catalogue, [s.patch for s in steps])}` rewrites it"
    pristine = fileops.read_or_none(journal_mod.pristine_path(target.site_packages, rel))
    installed = target.record.get(rel) if target.reference == RECORD_REFERENCE else None
    if (
        pristine is None
        or file_hash(pristine) != ours.before
        or installed not in (None, ours.before, ours.after)  # RECORD says it is not pristine
    ):
        return (
            f"{rel} was patched by {done} through codemods other than this tool's, and its "
            "pristine copy is missing, changed or not what RECORD lists, so their output cannot "
            f"be compared; {target.reinstall_hint}, then "
            f"`{apply_command(target, catalogue, [s.patch for s in steps])}`"
        )
    from ..transforms import codemod  # an unpinned release's only: libcst is not loaded otherwise

    try:
        text = pristine.decode("utf-8")
        for s in steps:
            assert s.transform is not None
            text = codemod.rewrite(s.transform, text, target.version).source
    except (PatchShapeError, UnicodeDecodeError) as exc:
        return (
            f"{rel} holds what other codemods of {done} made; this tool's fail on it ({exc}); {fix}"
        )
    if file_hash(text.encode("utf-8")) == ours.after:
        return None
    return (
        f"{rel} holds what another version of the codemods of {done} made (a tool upgrade?); "
        f"{fix} to this version's output"
    )


def apply_command(target: Target, catalogue: Catalogue, names: list[str]) -> str:
    """``apply`` on this environment with the folders of the user's patches among ``names``."""
    folders = dict.fromkeys(
        p.origin for n in names if (p := catalogue.get(n)) is not None and not p.builtin
    )
    return target.command(" ".join(filter(None, [patches_args(folders), "apply"])))


def _outdate(
    target: Target,
    catalogue: Catalogue,
    fs: FileStatus,
    journal: journal_mod.Journal | None,
    stale: str | None,
) -> FileStatus:
    """An applied file whose recorded result is stale, or a pristine or still-to-stack file of
    a patch recorded as applied elsewhere (its current version changes one more file)."""
    if fs.state is FileState.APPLIED and stale is not None:
        fs.state, fs.detail = FileState.OUTDATED, stale
    elif (
        fs.state is FileState.PENDING
        and journal is not None
        and journal.finished
        and fs.patch in journal.patches
    ):
        fs.state = FileState.OUTDATED
        fs.detail = (
            f"{fs.patch} is recorded as applied, but its current version also changes "
            f"{fs.path}; `{apply_command(target, catalogue, [fs.patch])}` brings it"
        )
    return fs


def pinned_end(steps: list[Step], reference: str | None) -> str | None:
    """The hash the pinned series ends at, when every step is pinned and each one's before is
    the previous one's after, starting from ``reference``; else None."""
    running = reference
    for step in steps:
        if step.pinned is None or step.pinned.before != running:
            return None
        running = step.pinned.after
    return running


def _judge_recorded(
    target: Target,
    journal: journal_mod.Journal,
    lay: Layout,
    rel: str,
    patch: str,
    data: bytes | None,
) -> FileStatus:
    """A file of a patch the journal names but this run's catalogue does not have on it: its
    folder was not given, or its current version no longer changes the file (outdated)."""
    fr = journal.files[rel]
    cur = file_hash(data) if data is not None else None
    fs = FileStatus(rel, patch, FileState.APPLIED, cur, target.record.get(rel))
    rec = journal.patches.get(patch)
    fs.method = rec.method if rec is not None else None
    if data is None:
        fs.state, fs.detail = FileState.MISSING, f"{rel} is missing; {target.reinstall_hint}"
    elif cur == fr.before and journal.finished:
        fs.state = FileState.REINSTALLED
        fs.detail = f"{rel} is back to its pristine bytes since apply (reinstalled?)"
    elif cur != fr.after:
        fs.state, fs.detail = FileState.EDITED, f"{rel} changed after vllm-patcher applied it"
    elif journal.finished and lay.verdicts.get(patch) is Verdict.APPLICABLE:
        fs.state = FileState.OUTDATED
        fs.detail = (
            f"{rel} holds an earlier version of {patch}, whose current version no longer "
            f"changes it; `{apply_command(target, lay.catalogue, [patch])}` takes that out"
        )
    elif journal.finished and (given := lay.catalogue.get(patch)) is not None:
        # its folder is given, but for this release it now produces nothing: out of its
        # releases, no diff any more, or upstream; the recorded bytes are not what it gives now
        verdict = lay.verdicts.get(patch)
        why = {
            Verdict.OUTSIDE: f"its releases ({given.releases}) no longer include vLLM {target.version}",
            Verdict.UNPORTED: f"its folder no longer has a diff for vLLM {target.version}",
            Verdict.UPSTREAM: f"it is now marked upstream from {given.fixed_in}",
        }.get(verdict, "its current version no longer changes this release")  # type: ignore[arg-type]
        fs.state = FileState.OUTDATED
        fs.detail = (
            f"{rel} holds {patch} as recorded, but {why}; "
            f"`{apply_command(target, lay.catalogue, [])}` brings the files to what the "
            "patches given now produce"
        )
    return fs


def _judge_file(
    target: Target,
    journal: journal_mod.Journal | None,
    contents: dict[str, bytes | None],
    step: Step,
    end: str | None,
    method: str | None,
    detect_upstream: bool,
    data: bytes | None,
) -> FileStatus:
    rel, patch = step.path, step.patch
    ref = target.record.get(rel)
    cur = file_hash(data) if data is not None else None
    fs = FileStatus(rel, patch, FileState.PENDING, cur, ref)
    ours = journal.files.get(rel) if journal is not None else None
    finished = journal is not None and journal.finished
    if data is None:
        fs.state, fs.detail = FileState.MISSING, f"{rel} is missing; {target.reinstall_hint}"
    elif ours is not None and cur == ours.after:
        if patch in ours.patches:
            fs.state = FileState.APPLIED
            rec = journal.patches.get(patch) if journal is not None else None
            fs.method = rec.method if rec is not None else None
        else:
            fs.method = method
            fs.detail = f"{rel} carries {', '.join(ours.patches)}; {patch} is still to stack"
    elif ours is not None and cur == ours.before:
        if finished:
            fs.state = FileState.REINSTALLED
            fs.detail = f"{rel} is back to its pristine bytes since apply (reinstalled?)"
        else:
            fs.method = method
    elif ours is not None:
        fs.state, fs.detail = FileState.EDITED, f"{rel} changed after vllm-patcher applied it"
    elif cur != ref:
        if end is not None and cur == end:
            fs.state, fs.method = FileState.UNRECORDED, PINNED_DIFF
            fs.detail = f"{rel} has the pinned result but no vllm-patcher record (applied by hand?)"
        else:
            fs.state = FileState.MODIFIED
            fs.detail = f"{rel} differs from {target.pristine_phrase} (local edit?)"
    else:
        fs.method = method
        if (
            method == TRANSFORM
            and detect_upstream
            and step.transform is not None
            and not transform_would_change(step.transform, data, target.version)
        ):
            fs.state, fs.method = FileState.UPSTREAM, None
    return fs


def transform_would_change(change: FileChange, data: bytes, version: str) -> bool:
    from ..transforms import codemod  # an unpinned release's only: libcst is not loaded otherwise

    try:
        return codemod.rewrite(change, data.decode("utf-8"), version).changed
    except (PatchShapeError, UnicodeDecodeError):
        return True  # apply reports the precise reason; status just says the change is not there
