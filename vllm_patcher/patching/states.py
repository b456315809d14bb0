"""What a status is: the state of each file and each patch on one target, and the fingerprint
that tells two nodes apart. Plain data; judging the bytes is ``survey``'s job, and turning file
states into patch states is ``status``'s."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from enum import Enum


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
    NOT_CHOSEN = "not-chosen"  # another patch was chosen for this run or environment: not judged


BLOCKING = (FileState.MODIFIED, FileState.EDITED, FileState.MISSING)
# how a file's change was (or would be) made: its pinned diff, or the patch's libcst codemod
PINNED_DIFF, TRANSFORM = "pinned-diff", "transform"


def patch_method(methods: Iterable[str | None]) -> str | None:
    """A patch's method over its files' methods: the pinned diff only when every file that says
    took it; the transform when any file took it (a patch of two files, one off its pin, is
    partly the codemod's work); None when no file says."""
    found = {m for m in methods if m}
    return PINNED_DIFF if found == {PINNED_DIFF} else (TRANSFORM if found else None)


TODO = (FileState.PENDING, FileState.REINSTALLED)
READY = (
    PatchState.APPLIED,
    PatchState.UPSTREAM,
    PatchState.NOT_APPLICABLE,
    PatchState.NOT_CHOSEN,
)


# Plain classes, not dataclasses: defining a dataclass imports ``inspect`` and compiles its
# methods, a sixth of status's start-up.


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
        self.shape = shape  # wheel | editable | source
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
