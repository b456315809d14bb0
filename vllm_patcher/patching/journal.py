"""The tool's record inside the target: the journal, the pristine copies and the lock.

``<root>/.vllm-patcher/`` holds ``state.json`` (what was applied, by which method, with each file's
hash before and after), ``pristine/`` (the pristine bytes of every touched file) and ``lock``
(serialises runs). ``state.json`` is also the journal: its phase is ``applying`` or ``reverting``
while files are being replaced, ``applied`` once done. The folder and its lock file are never
removed, so a run waiting on the lock always waits on the same file as the one holding it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from .. import fileops
from ..errors import BadSetting, LocallyModified, LockTimeout, NotWritable, StateError

STATE_DIR = ".vllm-patcher"
FORMAT = 2
TOOL = "vllm-patcher"
DEFAULT_LOCK_TIMEOUT = 60.0


class Phase(str, Enum):
    APPLYING = "applying"
    APPLIED = "applied"
    REVERTING = "reverting"


# Plain classes, not dataclasses: the journal is read on every command's start-up path.


class FileRecord:
    """One touched file: the patches on it (in series order) and its hashes before and after."""

    __slots__ = ("patches", "before", "after", "was", "producer")

    def __init__(
        self,
        patches: list[str],
        before: str,
        after: str,
        was: str | None = None,
        producer: str | None = None,
    ):
        self.patches = patches
        self.before = before
        self.after = after
        self.was = was  # while applying: the bytes an earlier apply left (a series grows)
        # the codemods that made ``after`` (``survey.producer``); None: a pinned diff made it
        self.producer = producer

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileRecord) and _fields(self) == _fields(other)

    def __repr__(self) -> str:
        return f"FileRecord{_fields(self)!r}"


class PatchRecord:
    __slots__ = ("method", "files")

    def __init__(self, method: str, files: list[str]) -> None:
        self.method = method
        self.files = files

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PatchRecord) and _fields(self) == _fields(other)

    def __repr__(self) -> str:
        return f"PatchRecord{_fields(self)!r}"


class Journal:
    __slots__ = ("vllm_version", "phase", "patches", "files")

    def __init__(
        self,
        vllm_version: str,
        phase: Phase,
        patches: dict[str, PatchRecord] | None = None,
        files: dict[str, FileRecord] | None = None,
    ) -> None:
        self.vllm_version = vllm_version
        self.phase = phase
        self.patches: dict[str, PatchRecord] = {} if patches is None else patches
        self.files: dict[str, FileRecord] = {} if files is None else files

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Journal) and _fields(self) == _fields(other)

    def __repr__(self) -> str:
        return f"Journal{_fields(self)!r}"

    @property
    def finished(self) -> bool:
        return self.phase is Phase.APPLIED

    def to_json(self) -> str:
        data = {
            "tool": TOOL,
            "format": FORMAT,
            "vllm_version": self.vllm_version,
            "phase": self.phase.value,
            "patches": {
                k: {"method": v.method, "files": v.files} for k, v in sorted(self.patches.items())
            },
            "files": {
                k: {"patches": v.patches, "before": v.before, "after": v.after}
                | ({"was": v.was} if v.was else {})
                | ({"producer": v.producer} if v.producer else {})
                for k, v in sorted(self.files.items())
            },
        }
        return json.dumps(data, indent=2) + "\n"


def _fields(record: FileRecord | PatchRecord | Journal) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in record.__slots__)


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


# The state folder's entries, named here only (patch-package's stateFile.ts is the model): the
# journal, the pristine copies, the lock, and the copies of edits revert --force saved.
def state_file(root: Path) -> Path:
    return state_dir(root) / "state.json"


def pristine_dir(root: Path) -> Path:
    return state_dir(root) / "pristine"


def lock_file(root: Path) -> Path:
    return state_dir(root) / "lock"


def saved_dir(root: Path) -> Path:
    return state_dir(root) / "saved"


def pristine_path(root: Path, rel: str) -> Path:
    return pristine_dir(root) / rel


def _fix_hint(root: Path) -> str:
    return (
        f"reinstall vLLM (pip install --force-reinstall --no-deps vllm==VERSION) and remove "
        f"{state_dir(root)}"
    )


def check_state_dir(root: Path) -> None:
    """Our state folder must be a real folder beside vllm/, never a link elsewhere, and so must
    its folder of pristine copies (a link there would have copies written and removed
    elsewhere)."""
    directory = state_dir(root)
    if directory.is_symlink() or (
        directory.exists() and directory.resolve().parent != root.resolve()
    ):
        raise LocallyModified(
            f"{directory} is a link; refusing to read or write vllm-patcher state through it "
            "(remove the link)"
        )
    copies = pristine_dir(root)
    if copies.is_symlink() or (copies.exists() and not copies.is_dir()):
        raise LocallyModified(
            f"{copies} is not a folder of its own (a link or a file); refusing to read or write "
            "pristine copies through it (remove it)"
        )


def load(root: Path) -> Journal | None:
    """The journal, or None when nothing is recorded. Read once per command."""
    check_state_dir(root)
    path = state_file(root)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or data.get("tool") != TOOL:
            raise ValueError("not a vllm-patcher state record")
        fmt = data.get("format")
        if fmt not in (1, FORMAT):
            raise ValueError(f"unknown format {fmt!r}")
        files = {}
        for k, v in data["files"].items():
            # format 1 (before series) named one patch per file
            names = [str(v["patch"])] if fmt == 1 else [str(p) for p in v["patches"]]
            was, producer = v.get("was"), v.get("producer")
            files[str(k)] = FileRecord(
                names,
                str(v["before"]),
                str(v["after"]),
                str(was) if was else None,
                str(producer) if producer else None,
            )
        journal = Journal(
            vllm_version=str(data["vllm_version"]),
            phase=Phase(data["phase"]),
            patches={
                str(k): PatchRecord(method=str(v["method"]), files=[str(f) for f in v["files"]])
                for k, v in data["patches"].items()
            },
            files=files,
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise StateError(f"state record {path} is corrupt ({exc}); {_fix_hint(root)}") from None
    for rel in journal.files:
        if not fileops.is_package_path(rel):
            raise StateError(
                f"state record {path} names a file outside vllm/ ({rel}); {_fix_hint(root)}"
            )
    return journal


def save(root: Path, journal: Journal) -> None:
    fileops.atomic_write(state_file(root), journal.to_json().encode("utf-8"))
    fileops.fault_point("journal")


def clear(root: Path, rels: list[str]) -> None:
    """Forget the record, then the pristine copies of ``rels`` (only ever called under the lock)."""
    fileops.remove(state_file(root))
    for rel in rels:
        fileops.remove(pristine_path(root, rel))
    fileops.prune_empty_dirs(pristine_dir(root))
    with contextlib.suppress(OSError):
        (pristine_dir(root)).rmdir()


def lock_timeout() -> float:
    raw = os.environ.get("VLLM_PATCHER_LOCK_TIMEOUT")
    if raw is None or not raw.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadSetting(
            f"VLLM_PATCHER_LOCK_TIMEOUT={raw!r} is not a number of seconds >= 0; "
            f"set it to e.g. {DEFAULT_LOCK_TIMEOUT:g} (the default)"
        )
    return value


@contextmanager
def locked(
    root: Path,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    read_only: bool = False,
) -> Iterator[None]:
    """Hold the environment's lock; wait up to ``timeout`` seconds for another run to finish.

    The default wait is 60 s, or ``VLLM_PATCHER_LOCK_TIMEOUT`` seconds when set. With
    ``read_only``, an environment where the lock cannot even be created is read without it.
    """
    if timeout is None:
        timeout = lock_timeout()
    check_state_dir(root)
    directory = state_dir(root)
    lock_path = lock_file(root)
    try:
        fileops.ensure_dir(directory)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except (OSError, NotWritable) as exc:
        if read_only and not lock_path.exists():
            # A reader (apply --dry-run) on an environment nobody can write: no run can be
            # changing it, so there is nothing to wait for.
            yield
            return
        if isinstance(exc, NotWritable):
            raise
        raise NotWritable(fileops.os_error_message(lock_path, exc)) from None
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"another vllm-patcher holds {lock_path}{_holder(fd)}; waited {timeout:g}s, "
                        "nothing was changed; wait for it to finish, or check for a stuck process"
                    ) from None
                if on_wait is not None and not told:
                    on_wait(
                        f"waiting for the lock {lock_path}{_holder(fd, since=True)}; "
                        f"giving up after {timeout:g} s"
                    )
                    told = True
                time.sleep(0.02)
        # the holder's identity, for a person looking at a stuck lock
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        fileops.fault_point("locked")
        yield
    finally:
        os.close(fd)


def _holder(fd: int, since: bool = False) -> str:
    """ " (last taken by pid N)" from the lock file, where the holder wrote it; with ``since``,
    also when: the file's modification time, which only a run taking the lock changes.

    "Last taken by", because a reader (status) holds the lock without writing its pid.
    """
    try:
        pid = os.pread(fd, 32, 0).decode("ascii").strip()
        taken = os.fstat(fd).st_mtime
    except (OSError, UnicodeDecodeError):
        return ""
    if not pid.isdigit():
        return ""
    at = time.strftime(" at %H:%M:%S", time.localtime(taken)) if since else ""
    return f" (last taken by pid {pid}{at})"


@contextmanager
def observed(root: Path) -> Iterator[bool]:
    """For readers (status): yield True when a run holds the lock right now, never wait.

    When no run holds it, a shared lock is held while the caller reads, so no run can start
    changing files halfway through the reading.
    """
    lock_path = lock_file(root)
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        yield False  # no lock file: no run has ever started here
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield True
            return
        yield False
    finally:
        os.close(fd)


class LeftInPlace(NamedTuple):
    """What revert leaves: the state folder, and whether saved/ may hold copies of your edits
    (from any earlier ``revert --force``), so removing the folder could lose them."""

    folder: Path
    copies: bool


def left_in_place(root: Path) -> LeftInPlace:
    """What revert leaves in the state folder, read from the folder."""
    folder = state_dir(root)
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError:
        names = []
    try:
        saved = saved_dir(root)
        copies = saved.name in names and any(saved.iterdir())
    except OSError:  # a saved/ it cannot list may hold copies all the same
        copies = True
    return LeftInPlace(folder, copies)
