"""What state each patch is in on one target, judged from file bytes, the reference hashes (the
installer's RECORD, or the pinned manifest for a source tree) and the tool's own journal.

Reading is one pass: ``survey`` reads every touched file once and keeps the bytes in a
``contents`` dict so the transaction plans from exactly what was judged; ``judge`` turns the
file states into patch states without reading anything. A pinned release never imports libcst
here; only an unpinned release asks the transform whether a change is already there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from . import catalog, fileops, pinned
from . import journal as journal_mod
from .catalog import Release
from .errors import PatchShapeError
from .target import Target, file_hash


class _Label(str, Enum):
    """A state name that prints as itself (``f"{state}"`` is ``applied`` on every Python)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class FileState(_Label):
    PENDING = "pending"  # pristine, the change is still to do
    APPLIED = "applied"  # our recorded bytes
    UPSTREAM = "upstream"  # this release already has the change
    UNRECORDED = "unrecorded"  # the pinned result, but no record (git apply by hand, lost state)
    MODIFIED = "modified"  # differs from the reference without our doing
    EDITED = "edited"  # changed after we applied it
    REINSTALLED = "reinstalled"  # back to pristine although our record says applied
    MISSING = "missing"


class PatchState(_Label):
    PENDING = "pending"
    APPLIED = "applied"
    UPSTREAM = "upstream"
    UNRECORDED = "unrecorded"
    NOT_APPLICABLE = "not-applicable"
    DRIFTED = "drifted"


BLOCKING = (FileState.MODIFIED, FileState.EDITED, FileState.MISSING)
TODO = (FileState.PENDING, FileState.REINSTALLED)
READY = (PatchState.APPLIED, PatchState.UPSTREAM, PatchState.NOT_APPLICABLE)


@dataclass
class FileStatus:
    path: str
    patch: str
    state: FileState
    current: str | None
    reference: str | None
    method: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "patch": self.patch,
            "state": self.state.value,
            "sha256": self.current,
            "record_sha256": self.reference,
            "detail": self.detail,
        }


@dataclass
class PatchStatus:
    name: str
    state: PatchState
    method: str | None
    files: list[str]
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "state": self.state.value,
            "method": self.method,
            "files": self.files,
            "detail": self.detail,
        }


@dataclass
class Status:
    vllm_version: str
    location: str
    distribution: str
    release: str
    patches: list[PatchStatus]
    files: list[FileStatus] = field(default_factory=list)
    fingerprint: str = ""
    interrupted: str | None = None  # phase of an unfinished journal, if any
    in_progress: bool = False  # another run holds the lock right now
    shape: str = "wheel"  # wheel | editable | source | directory
    reference: str = ""  # what pristine means here (RECORD, or a pinned manifest)

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


def fingerprint(version: str, hashes: dict[str, str | None]) -> str:
    """Equal on every node whose vLLM version and touched files are byte-identical."""
    h = hashlib.sha256(f"vllm=={version}\n".encode())
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
    pin: pinned.PinnedRelease | None,
    contents: dict[str, bytes | None],
    detect_upstream: bool = True,
) -> list[FileStatus]:
    """One FileStatus per applicable file of every patch (patchable releases only).

    With ``detect_upstream`` false, a pristine file of an unpinned release is ``pending`` without
    running its transform (apply runs it anyway and skips a file the transform leaves unchanged).
    """
    files = []
    for patch in catalog.PATCHES:
        for change in patch.applicable(target.record):
            files.append(
                _judge_file(target, journal, pin, contents, patch.name, change, detect_upstream)
            )
    return files


def _judge_file(
    target: Target,
    journal: journal_mod.Journal | None,
    pin: pinned.PinnedRelease | None,
    contents: dict[str, bytes | None],
    patch: str,
    change: catalog.FileChange,
    detect_upstream: bool,
) -> FileStatus:
    rel = change.path
    data = read_once(target, rel, contents)
    ref = target.record.get(rel)
    cur = file_hash(data) if data is not None else None
    fs = FileStatus(rel, patch, FileState.PENDING, cur, ref)
    ours = journal.files.get(rel) if journal is not None else None
    finished = journal is not None and journal.finished
    if data is None:
        fs.state, fs.detail = FileState.MISSING, f"{rel} is missing; {target.reinstall_hint}"
    elif ours is not None and cur == ours.after:
        fs.state = FileState.APPLIED
        rec = journal.patches.get(patch) if journal is not None else None
        fs.method = rec.method if rec is not None else None
    elif ours is not None and cur == ours.before:
        if finished:
            fs.state = FileState.REINSTALLED
            fs.detail = f"{rel} is back to its pristine bytes since apply (reinstalled?)"
        else:
            fs.method = _pristine_method(pin, rel, cur)
    elif ours is not None:
        fs.state, fs.detail = FileState.EDITED, f"{rel} changed after vllm-patcher applied it"
    elif cur != ref:
        pinned_file = pin.files.get(rel) if pin is not None else None
        if pinned_file is not None and cur == pinned_file.after and ref == pinned_file.before:
            fs.state, fs.method = FileState.UNRECORDED, "pinned-diff"
            fs.detail = (
                f"{rel} has the pinned result but no vllm-patcher record (applied by hand?); "
                "`vllm-patcher apply` adopts it"
            )
        else:
            fs.state = FileState.MODIFIED
            fs.detail = f"{rel} differs from {target.pristine_phrase} (local edit?)"
    else:
        fs.method = _pristine_method(pin, rel, cur)
        if (
            fs.method == "transform"
            and detect_upstream
            and not _transform_would_change(change, data)
        ):
            fs.state, fs.method = FileState.UPSTREAM, None
    return fs


def _pristine_method(pin: pinned.PinnedRelease | None, rel: str, cur: str | None) -> str:
    pinned_file = pin.files.get(rel) if pin is not None else None
    return "pinned-diff" if pinned_file is not None and pinned_file.before == cur else "transform"


def _transform_would_change(change: catalog.FileChange, data: bytes) -> bool:
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
    files: list[FileStatus],
    in_progress: bool = False,
) -> Status:
    """Patch states from file states: no file is read here."""
    patches = []
    unfinished = journal is not None and not journal.finished
    for p in catalog.PATCHES:
        mine = [f for f in files if f.patch == p.name]
        state, method, detail = _patch_state(mine)
        if state is not PatchState.NOT_APPLICABLE and in_progress:
            detail = "another vllm-patcher run is changing these files right now"
        elif state is not PatchState.NOT_APPLICABLE and unfinished and journal is not None:
            detail = (
                f"an earlier {journal.phase.value[:-3]} was interrupted; "
                "run apply or revert to recover"
            )
        patches.append(PatchStatus(p.name, state, method, [f.path for f in mine], detail))
    return Status(
        vllm_version=target.version,
        location=str(target.site_packages),
        distribution=target.distribution,
        release=Release.PATCHABLE.value,
        patches=patches,
        files=files,
        fingerprint=fingerprint(target.version, {f.path: f.current for f in files}),
        interrupted=journal.phase.value if unfinished and journal is not None else None,
        in_progress=in_progress,
        shape=target.shape,
        reference=target.reference,
    )


def upstream_status(target: Target) -> Status:
    contents: dict[str, bytes | None] = {}
    hashes: dict[str, str | None] = {}
    for rel in catalog.touched_files(target.record):
        data = read_once(target, rel, contents)
        hashes[rel] = file_hash(data) if data is not None else None
    return Status(
        vllm_version=target.version,
        location=str(target.site_packages),
        distribution=target.distribution,
        release=Release.UPSTREAM.value,
        patches=[
            PatchStatus(
                p.name, PatchState.UPSTREAM, None, [c.path for c in p.applicable(target.record)]
            )
            for p in catalog.PATCHES
        ],
        fingerprint=fingerprint(target.version, hashes),
        shape=target.shape,
        reference=target.reference,
    )


def read_status(target: Target, pins_root: Path | None = None) -> Status:
    """The status of ``target``, without ever waiting for the lock.

    While another run holds the lock, the files are read as they are and the result says
    ``in_progress``; otherwise a shared lock keeps runs from starting halfway through the reading.
    """
    if catalog.classify(target.version) is Release.UPSTREAM:
        return upstream_status(target)
    pin = pinned.load(target.version, pins_root)
    root = target.site_packages
    had_lock = (journal_mod.state_dir(root) / "lock").exists()
    with journal_mod.observed(root) as busy:
        journal = journal_mod.load(root)
        files = survey(target, journal, pin, {})
    if not busy and not had_lock:
        # no lock file when we started: a first run may have begun while we read
        with journal_mod.observed(root) as busy_now:
            busy = busy_now
    return judge(target, journal, files, in_progress=busy)
