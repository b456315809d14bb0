"""What state each patch is in on one target, read from file hashes, RECORD and our state record.

Reading status never imports libcst on a pinned release: a pristine file of a pinned release is
``pending`` by its manifest. Only an unpinned release asks the transform whether the change is
already there (``upstream``) or still to do (``pending``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from . import catalog, pinned
from . import state as state_mod
from .catalog import Release
from .errors import PatchShapeError
from .target import Target, file_hash

# File states. "modified": differs from RECORD without our doing; "edited": changed after we
# applied; "reinstalled": back to RECORD although our record says applied.
PENDING, APPLIED, UPSTREAM, MODIFIED, EDITED, REINSTALLED, MISSING = (
    "pending",
    "applied",
    "upstream",
    "modified",
    "edited",
    "reinstalled",
    "missing",
)


@dataclass
class FileStatus:
    path: str
    patch: str
    state: str
    current: str | None
    record: str | None
    method: str | None = None
    detail: str = ""


@dataclass
class PatchStatus:
    name: str
    state: str  # pending | applied | upstream | not-applicable | drifted
    method: str | None
    files: list[str]
    detail: str = ""


@dataclass
class Status:
    vllm_version: str
    location: str
    distribution: str
    release: str
    patches: list[PatchStatus]
    files: list[FileStatus] = field(default_factory=list)
    fingerprint: str = ""
    interrupted: str | None = None  # phase of an interrupted run, if any

    def to_dict(self) -> dict[str, object]:
        return {
            "vllm_version": self.vllm_version,
            "location": self.location,
            "distribution": self.distribution,
            "release": self.release,
            "fingerprint": self.fingerprint,
            "interrupted": self.interrupted,
            "patches": [
                {
                    "name": p.name,
                    "state": p.state,
                    "method": p.method,
                    "files": p.files,
                    "detail": p.detail,
                }
                for p in self.patches
            ],
            "files": [
                {
                    "path": f.path,
                    "patch": f.patch,
                    "state": f.state,
                    "sha256": f.current,
                    "record_sha256": f.record,
                    "detail": f.detail,
                }
                for f in self.files
            ],
        }


def read_bytes(target: Target, rel: str) -> bytes | None:
    try:
        return target.path(rel).read_bytes()
    except FileNotFoundError:
        return None


def fingerprint(version: str, hashes: dict[str, str | None]) -> str:
    """Equal on every node whose vLLM version and touched files are byte-identical."""
    h = hashlib.sha256(f"vllm=={version}\n".encode())
    for rel in sorted(hashes):
        h.update(f"{rel} {hashes[rel] or '-'}\n".encode())
    return "sha256:" + h.hexdigest()[:32]


def survey(
    target: Target,
    record: state_mod.PatchState | None,
    release_pin: pinned.PinnedRelease | None,
    contents: dict[str, bytes | None] | None = None,
    detect_upstream: bool = True,
) -> list[FileStatus]:
    """One FileStatus per applicable file of every patch (patchable releases only).

    ``contents`` receives the bytes read, so a caller can reuse them. With ``detect_upstream``
    false, a pristine file of an unpinned release is ``pending`` without running its transform
    (apply runs it anyway and skips a file the transform leaves unchanged).
    """
    files = []
    for patch in catalog.PATCHES:
        for change in patch.applicable(target.record):
            rel = change.path
            data = (
                contents[rel]
                if contents is not None and rel in contents
                else read_bytes(target, rel)
            )
            rec = target.record.get(rel)
            cur = file_hash(data) if data is not None else None
            fs = FileStatus(rel, patch.name, PENDING, cur, rec)
            ours = record.files.get(rel) if record and record.phase == "applied" else None
            if data is None:
                fs.state, fs.detail = MISSING, f"{rel} is missing; reinstall vLLM"
            elif ours is not None and cur == ours.after:
                fs.state = APPLIED
                fs.method = (
                    record.patches[ours.patch].method
                    if record and ours.patch in record.patches
                    else None
                )
            elif ours is not None and cur == rec:
                fs.state, fs.detail = (
                    REINSTALLED,
                    "back to the installer's bytes since apply (reinstalled?)",
                )
            elif ours is not None:
                fs.state, fs.detail = EDITED, f"{rel} changed after vllm-patcher applied it"
            elif cur != rec:
                fs.state, fs.detail = (
                    MODIFIED,
                    f"{rel} differs from the installer's RECORD (local edit?)",
                )
            else:
                pin = release_pin.files.get(rel) if release_pin else None
                if pin is not None and pin.before == cur:
                    fs.method = "pinned-diff"
                else:
                    fs.method = "transform"
                    if detect_upstream and not _transform_would_change(change, data):
                        fs.state, fs.method = UPSTREAM, None
            files.append(fs)
    return files


def _transform_would_change(change: catalog.FileChange, data: bytes) -> bool:
    try:
        return change.rewrite(data.decode("utf-8")).changed
    except (PatchShapeError, UnicodeDecodeError):
        return True  # apply reports the precise reason; status just says the change is not there


def _patch_state(files: list[FileStatus]) -> tuple[str, str | None, str]:
    if not files:
        return "not-applicable", None, "this release has none of the files this patch touches"
    states = {f.state for f in files}
    bad = [f for f in files if f.state in (MODIFIED, EDITED, REINSTALLED, MISSING)]
    if bad:
        return "drifted", None, "; ".join(f.detail for f in bad)
    methods = {f.method for f in files if f.method}
    method = "pinned-diff" if methods == {"pinned-diff"} else ("transform" if methods else None)
    if states == {APPLIED}:
        return "applied", method, ""
    if states == {UPSTREAM}:
        return "upstream", None, ""
    if states <= {PENDING, UPSTREAM}:
        return "pending", method, ""
    return "drifted", method, "only part of this patch is applied"


def read_status(target: Target, pins_root: Path | None = None) -> Status:
    release = catalog.classify(target.version)
    record = state_mod.load(target.site_packages)
    hashes: dict[str, str | None] = {}
    if release is Release.UPSTREAM:
        patches = [
            PatchStatus(p.name, "upstream", None, [c.path for c in p.applicable(target.record)])
            for p in catalog.PATCHES
        ]
        for rel in catalog.touched_files(target.record):
            data = read_bytes(target, rel)
            hashes[rel] = file_hash(data) if data is not None else None
        files: list[FileStatus] = []
    else:
        files = survey(target, record, pinned.load(target.version, pins_root))
        patches = []
        for p in catalog.PATCHES:
            mine = [f for f in files if f.patch == p.name]
            st, method, detail = _patch_state(mine)
            if record and record.phase != "applied" and st != "not-applicable":
                detail = f"an earlier {record.phase[:-3]} was interrupted; run apply or revert to recover"
            patches.append(PatchStatus(p.name, st, method, [f.path for f in mine], detail))
        hashes = {f.path: f.current for f in files}
    return Status(
        vllm_version=target.version,
        location=str(target.site_packages),
        distribution=target.distribution,
        release=release.value,
        patches=patches,
        files=files,
        fingerprint=fingerprint(target.version, hashes),
        interrupted=record.phase if record and record.phase != "applied" else None,
    )
