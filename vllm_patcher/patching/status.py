"""What state each patch is in on one target, judged from file bytes, the reference hashes (the
installer's RECORD, or the pinned manifest for a source tree) and the tool's own journal.

Reading is one pass: ``survey`` reads every touched file once and keeps the bytes in a
``contents`` dict so the transaction plans from exactly what was judged; ``judge`` turns the
file states into patch states without reading anything. A pinned release never imports libcst
here; only an unpinned release asks the transform whether a change is already there.
"""

from __future__ import annotations

import hashlib
from enum import Enum

from .. import fileops
from ..catalogue import support
from ..catalogue.folders import patches_args
from ..catalogue.layout import Layout, Step, Verdict, layout
from ..catalogue.model import Catalogue, FileChange
from ..errors import PatchShapeError
from ..install.record import file_hash
from ..install.target import Target
from ..releases import Release, base_version
from . import journal as journal_mod


class _Label(str, Enum):
    """A state name that prints as itself (``f"{state}"`` is ``applied`` on every Python)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class FileState(_Label):
    PENDING = "pending"  # pristine, the change is still to do
    APPLIED = "applied"  # our recorded bytes, which the patches given now produce
    OUTDATED = "outdated"  # our recorded bytes, from an earlier version of the patches given now
    UPSTREAM = "upstream"  # this release already has the change
    UNRECORDED = "unrecorded"  # the pinned result, but no record (git apply by hand, lost state)
    MODIFIED = "modified"  # differs from the reference without our doing
    EDITED = "edited"  # changed after we applied it
    REINSTALLED = "reinstalled"  # back to pristine although our record says applied
    MISSING = "missing"


class PatchState(_Label):
    PENDING = "pending"
    APPLIED = "applied"
    OUTDATED = "outdated"  # applied, but an earlier version of it: apply brings the current one
    UPSTREAM = "upstream"
    UNRECORDED = "unrecorded"
    NOT_APPLICABLE = "not-applicable"
    DRIFTED = "drifted"
    UNPORTED = "unported"  # the release is in range but the patch has no diff for it


BLOCKING = (FileState.MODIFIED, FileState.EDITED, FileState.MISSING)
TODO = (FileState.PENDING, FileState.REINSTALLED)
READY = (PatchState.APPLIED, PatchState.UPSTREAM, PatchState.NOT_APPLICABLE)


# Plain classes, not dataclasses: defining a dataclass compiles its methods at import, on the
# start-up path of every status (README, Benchmarks).


class FileStatus:
    __slots__ = ("path", "patch", "state", "current", "reference", "method", "detail")

    def __init__(
        self,
        path: str,
        patch: str,
        state: FileState,
        current: str | None,
        reference: str | None,
        method: str | None = None,
        detail: str = "",
    ) -> None:
        self.path = path
        self.patch = patch
        self.state = state
        self.current = current
        self.reference = reference
        self.method = method
        self.detail = detail

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "patch": self.patch,
            "state": self.state.value,
            "sha256": self.current,
            "record_sha256": self.reference,
            "detail": self.detail,
        }


class PatchStatus:
    __slots__ = ("name", "state", "method", "files", "detail", "origin")

    def __init__(
        self,
        name: str,
        state: PatchState,
        method: str | None,
        files: list[str],
        detail: str = "",
        origin: str = "built-in",
    ) -> None:
        self.name = name
        self.state = state
        self.method = method
        self.files = files
        self.detail = detail
        self.origin = origin

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "origin": self.origin,
            "state": self.state.value,
            "method": self.method,
            "files": self.files,
            "detail": self.detail,
        }


class Status:
    __slots__ = (
        "vllm_version",
        "location",
        "distribution",
        "release",
        "patches",
        "files",
        "fingerprint",
        "interrupted",
        "in_progress",
        "shape",
        "reference",
    )

    def __init__(
        self,
        vllm_version: str,
        location: str,
        distribution: str,
        release: str,
        patches: list[PatchStatus],
        files: list[FileStatus] | None = None,
        fingerprint: str = "",
        interrupted: str | None = None,
        in_progress: bool = False,
        shape: str = "wheel",
        reference: str = "",
    ) -> None:
        self.vllm_version = vllm_version
        self.location = location
        self.distribution = distribution
        self.release = release
        self.patches = patches
        self.files: list[FileStatus] = [] if files is None else files
        self.fingerprint = fingerprint
        self.interrupted = interrupted  # phase of an unfinished journal, if any
        self.in_progress = in_progress  # another run holds the lock right now
        self.shape = shape  # wheel | editable | source | directory
        self.reference = reference  # what pristine means here (RECORD, or a pinned manifest)

    @property
    def ready(self) -> bool:
        return not self.in_progress and all(p.state in READY for p in self.patches)

    def to_dict(self) -> dict[str, object]:
        return {
            "vllm_version": self.vllm_version,
            "location": self.location,
            "distribution": self.distribution,
            "release": self.release,
            "fingerprint": self.fingerprint,
            "interrupted": self.interrupted,
            "in_progress": self.in_progress,
            "shape": self.shape,
            "reference": self.reference,
            "patches": [p.to_dict() for p in self.patches],
            "files": [f.to_dict() for f in self.files],
        }


def fingerprint(version: str, hashes: dict[str, str | None], applied: list[str]) -> str:
    """Equal on every node whose vLLM version, touched files and applied patches are identical."""
    h = hashlib.sha256(f"vllm=={version}\n".encode())
    for name in applied:
        h.update(f"patch {name}\n".encode())
    for rel in sorted(hashes):
        h.update(f"{rel} {hashes[rel] or '-'}\n".encode())
    return "sha256:" + h.hexdigest()[:32]


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
        return ["pinned-diff"] * len(steps)
    if all(s.transform is not None for s in steps):
        return ["transform"] * len(steps)
    return [
        "pinned-diff" if s.pinned is not None else ("transform" if s.transform else None)
        for s in steps
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
                return None  # apply would run the transforms: their result is not known here
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
            fs.state, fs.method = FileState.UNRECORDED, "pinned-diff"
            fs.detail = f"{rel} has the pinned result but no vllm-patcher record (applied by hand?)"
        else:
            fs.state = FileState.MODIFIED
            fs.detail = f"{rel} differs from {target.pristine_phrase} (local edit?)"
    else:
        fs.method = method
        if (
            method == "transform"
            and detect_upstream
            and step.transform is not None
            and not transform_would_change(step.transform, data)
        ):
            fs.state, fs.method = FileState.UPSTREAM, None
    return fs


def transform_would_change(change: FileChange, data: bytes) -> bool:
    try:
        return change.rewrite(data.decode("utf-8")).changed
    except (PatchShapeError, UnicodeDecodeError):
        return True  # apply reports the precise reason; status just says the change is not there


def _patch_state(files: list[FileStatus]) -> tuple[PatchState, str | None, str]:
    if not files:
        return (
            PatchState.NOT_APPLICABLE,
            None,
            "this release has none of the files this patch touches",
        )
    states = {f.state for f in files}
    bad = [f for f in files if f.state in (*BLOCKING, FileState.REINSTALLED)]
    if bad:
        return PatchState.DRIFTED, None, "; ".join(f.detail for f in bad)
    methods = {f.method for f in files if f.method}
    method = "pinned-diff" if methods == {"pinned-diff"} else ("transform" if methods else None)
    if states == {FileState.APPLIED}:
        return PatchState.APPLIED, method, ""
    if FileState.OUTDATED in states and states <= {
        FileState.APPLIED,
        FileState.OUTDATED,
        FileState.PENDING,
        FileState.UPSTREAM,
    }:
        stale = "; ".join(dict.fromkeys(f.detail for f in files if f.state is FileState.OUTDATED))
        return PatchState.OUTDATED, method, stale
    if states == {FileState.UPSTREAM}:
        return PatchState.UPSTREAM, None, ""
    if states <= {FileState.PENDING, FileState.UPSTREAM}:
        return PatchState.PENDING, method, ""
    if states == {FileState.UNRECORDED}:
        return PatchState.UNRECORDED, method, "; ".join(f.detail for f in files)
    return PatchState.DRIFTED, method, "only part of this patch is applied"


def judge(
    target: Target,
    journal: journal_mod.Journal | None,
    lay: Layout,
    files: list[FileStatus],
    in_progress: bool = False,
) -> Status:
    """Patch states from file states and the layout's verdicts: no file is read here."""
    patches = []
    unfinished = journal is not None and not journal.finished
    names = list(lay.catalogue.names)
    if journal is not None:
        names += [n for n in journal.patches if n not in names]
        names += [n for f in journal.files.values() for n in f.patches if n not in names]
    for name in dict.fromkeys(names):
        patch = lay.catalogue.get(name)
        mine = [f for f in files if f.patch == name]
        verdict = lay.verdicts.get(name)
        if mine or verdict in (None, Verdict.APPLICABLE):
            state, method, detail = _patch_state(mine)
            if verdict is Verdict.APPLICABLE and not mine:
                detail = "not selected for this run"
        elif verdict is Verdict.UPSTREAM:
            assert patch is not None
            state, method, detail = PatchState.UPSTREAM, None, f"vLLM has it from {patch.fixed_in}"
        elif verdict is Verdict.UNPORTED:
            assert patch is not None
            state, method = PatchState.UNPORTED, None
            fix = patch.unported_fix(target.version)
            why = (
                f"its conflicts for {base_version(target.version)} are waiting to be resolved"
                if fix.endswith("--continue`")
                else "no diff for this release"
            )
            detail = f"{why}; {fix}"
        else:
            assert patch is not None
            state, method = PatchState.NOT_APPLICABLE, None
            detail = (
                f"vLLM {target.version} is outside its releases ({patch.releases})"
                if verdict is Verdict.OUTSIDE
                else "this release has none of the files this patch touches"
            )
        if state not in (PatchState.NOT_APPLICABLE, PatchState.UPSTREAM) and in_progress:
            detail = "another vllm-patcher run is changing these files right now"
        elif state not in (PatchState.NOT_APPLICABLE, PatchState.UPSTREAM) and unfinished:
            assert journal is not None
            detail = (
                f"an earlier {journal.phase.value[:-3]} was interrupted; "
                "run apply or revert to recover"
            )
        origin = patch.origin if patch is not None else "recorded (its folder was not given)"
        patches.append(
            PatchStatus(
                name, state, method, list(dict.fromkeys(f.path for f in mine)), detail, origin
            )
        )
    hashes = {f.path: f.current for f in files}
    applied = sorted(p.name for p in patches if p.state is PatchState.APPLIED)
    return Status(
        vllm_version=target.version,
        location=str(target.site_packages),
        distribution=target.distribution,
        release=(
            Release.UPSTREAM if lay.all_upstream and journal is None else Release.PATCHABLE
        ).value,
        patches=patches,
        files=files,
        fingerprint=fingerprint(target.version, hashes, applied),
        interrupted=journal.phase.value if unfinished and journal is not None else None,
        in_progress=in_progress,
        shape=target.shape,
        reference=target.reference,
    )


def read_status(target: Target, catalogue: Catalogue) -> Status:
    """The status of ``target``, without ever waiting for the lock.

    While another run holds the lock, the files are read as they are and the result says
    ``in_progress``; otherwise a shared lock keeps runs from starting halfway through the reading.
    """
    support.classify(target.version)  # refuses releases before the allow-list existed
    root = target.site_packages
    had_lock = (journal_mod.state_dir(root) / "lock").exists()
    with journal_mod.observed(root) as busy:
        journal = journal_mod.load(root)
        lay = layout(catalogue, target.version, target.record, recorded_files(journal))
        files = survey(target, journal, lay, {})
        upstream = lay.all_upstream and journal is None
        hashes = _hash_upstream_files(target, catalogue) if upstream else {}
    if not busy and not had_lock:
        # no lock file when we started: a first run may have begun while we read
        with journal_mod.observed(root) as busy_now:
            busy = busy_now
    st = judge(target, journal, lay, files, in_progress=busy)
    if upstream:
        st.fingerprint = fingerprint(target.version, hashes, [])
    return st


def recorded_files(journal: journal_mod.Journal | None) -> dict[str, list[str]]:
    return {rel: list(fr.patches) for rel, fr in journal.files.items()} if journal else {}


def _hash_upstream_files(target: Target, catalogue: Catalogue) -> dict[str, str | None]:
    """On a release with everything upstream, the fingerprint covers every file a patch names."""
    hashes: dict[str, str | None] = {}
    contents: dict[str, bytes | None] = {}
    for rel in catalogue.paths_for(target.version):
        if rel in target.record:
            data = read_once(target, rel, contents)
            hashes[rel] = file_hash(data) if data is not None else None
    return hashes
