"""The tool's own record inside the target environment.

``<site-packages>/.vllm-patcher/`` holds ``state.json`` (what was applied, by which method, with
each file's hash before and after), ``pristine/`` (the installer's bytes of every touched file)
and ``lock`` (serialises concurrent runs). ``state.json`` doubles as the journal: its ``phase``
is ``applying`` or ``reverting`` while files are being replaced, ``applied`` once done.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import BadSetting, LocallyModified, LockTimeout, NotWritable, StateError

STATE_DIR = ".vllm-patcher"
FORMAT = 1
TOOL = "vllm-patcher"


@dataclass
class FileRecord:
    patch: str
    before: str
    after: str


@dataclass
class PatchRecord:
    method: str
    files: list[str]


@dataclass
class PatchState:
    vllm_version: str
    phase: str  # "applying" | "applied" | "reverting"
    patches: dict[str, PatchRecord] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {"tool": TOOL, "format": FORMAT, **asdict(self)}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def state_dir(site_packages: Path) -> Path:
    return site_packages / STATE_DIR


def pristine_path(site_packages: Path, rel: str) -> Path:
    return state_dir(site_packages) / "pristine" / rel


def _fix_hint(site_packages: Path) -> str:
    return (
        f"reinstall vLLM (pip install --force-reinstall --no-deps vllm==VERSION) and remove "
        f"{state_dir(site_packages)}"
    )


def check_state_dir(site_packages: Path) -> None:
    """Our state folder must be a real folder in site-packages, never a link elsewhere."""
    directory = state_dir(site_packages)
    if directory.is_symlink() or (
        directory.exists() and directory.resolve().parent != site_packages.resolve()
    ):
        raise LocallyModified(
            f"{directory} is a link; refusing to read or write vllm-patcher state through it "
            "(remove the link)"
        )


def load(site_packages: Path) -> PatchState | None:
    check_state_dir(site_packages)
    path = state_dir(site_packages) / "state.json"
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
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown format {data.get('format')!r}")
        state = PatchState(
            vllm_version=str(data["vllm_version"]),
            phase=str(data["phase"]),
            patches={
                str(k): PatchRecord(method=str(v["method"]), files=[str(f) for f in v["files"]])
                for k, v in data["patches"].items()
            },
            files={
                str(k): FileRecord(
                    patch=str(v["patch"]), before=str(v["before"]), after=str(v["after"])
                )
                for k, v in data["files"].items()
            },
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise StateError(
            f"state record {path} is corrupt ({exc}); {_fix_hint(site_packages)}"
        ) from None
    if state.phase not in ("applying", "applied", "reverting"):
        raise StateError(
            f"state record {path} has unknown phase {state.phase!r}; {_fix_hint(site_packages)}"
        )
    for rel in state.files:
        if not _is_package_path(rel):
            raise StateError(
                f"state record {path} names a file outside vllm/ ({rel}); {_fix_hint(site_packages)}"
            )
    return state


def _is_package_path(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and parts[0] == "vllm" and ".." not in parts and not Path(rel).is_absolute()


TMP_SUFFIX = ".vllm-patcher-tmp"


def _fault_delay() -> None:
    # Fault-injection hook for the crash tests: widen the window in which a kill lands mid-write.
    delay = os.environ.get("VLLM_PATCHER_FAULT_DELAY")
    if delay:
        time.sleep(float(delay))


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` so a reader sees the old bytes or the new, never a mix."""
    _fault_delay()
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode or 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise NotWritable(_os_error_message(path, exc)) from None
    fsync_dir(path.parent)


def sweep_temp_files(directories: list[Path]) -> None:
    """Remove temp files a killed run left behind (never imported: they do not end in .py)."""
    for directory in directories:
        for leftover in directory.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                leftover.unlink()


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _os_error_message(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return f"no space left on device while writing {path}; free some space and run again"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write {path}: {exc.strerror}; run as the environment's owner or make it writable"
    return f"cannot write {path}: {exc.strerror}"


def save(site_packages: Path, state: PatchState) -> None:
    directory = state_dir(site_packages)
    atomic_write(directory / "state.json", state.to_json().encode("utf-8"))


def ensure_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritable(_os_error_message(path, exc)) from None


@contextmanager
def locked(site_packages: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the environment's lock; wait up to ``timeout`` seconds for another run to finish.

    The default wait is 60 s, or ``VLLM_PATCHER_LOCK_TIMEOUT`` seconds when set.
    """
    if timeout is None:
        raw = os.environ.get("VLLM_PATCHER_LOCK_TIMEOUT", "60")
        try:
            timeout = float(raw)
        except ValueError:
            raise BadSetting(
                f"VLLM_PATCHER_LOCK_TIMEOUT={raw!r} is not a number of seconds"
            ) from None
    check_state_dir(site_packages)
    directory = state_dir(site_packages)
    ensure_dir(directory)
    lock_path = directory / "lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise NotWritable(_os_error_message(lock_path, exc)) from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"another vllm-patcher has held {lock_path} for {timeout:.0f}s; "
                        "wait for it to finish, or check for a stuck process"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
