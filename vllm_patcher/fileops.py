"""File operations the transaction is built from: atomic replace, fsync, temp sweeping, and the
one rule that maps an ``OSError`` to a message, plus the fault hook the crash and race tests use,
and where the tool's caches live (``cache_root``).

The fault hook (``VLLM_PATCHER_FAULT``) names a point of the transaction and what to do when a run
reaches it for the Nth time, so a test can place a kill, a pause or a full disk exactly, instead
of guessing with timers:

    VLLM_PATCHER_FAULT=ACTION@POINT[#N]     (POINT ``any`` counts every point)

``enospc`` raises "no space left on device"; ``interrupt`` raises KeyboardInterrupt (Ctrl-C);
``stop`` and ``pause`` create ``$VLLM_PATCHER_FAULT_DIR/reached-<pid>`` and wait, ``stop`` forever
(the test kills the run there), ``pause`` until ``$VLLM_PATCHER_FAULT_DIR/resume`` exists.
Points: ``locked``, ``surveyed``, ``planned``, ``write`` (before every file write, journal and
pristine copies included), ``replaced`` (after every write), ``journal`` (after each journal save).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from functools import cache
from pathlib import Path

from .errors import NotWritable

TMP_SUFFIX = ".vllm-patcher-tmp"


@cache
def _fault_spec() -> tuple[str, str, int] | None:
    raw = os.environ.get("VLLM_PATCHER_FAULT")
    if not raw or "@" not in raw:
        return None
    action, _, where = raw.partition("@")
    point, _, nth = where.partition("#")
    return action, point, int(nth or "1")


_reached: dict[str, int] = {}


def fault_point(point: str) -> None:
    """Called at each named point of a transaction; does nothing unless a test asked for a fault."""
    spec = _fault_spec()
    if spec is None:
        return
    action, wanted, nth = spec
    if wanted not in (point, "any"):
        return
    _reached[wanted] = _reached.get(wanted, 0) + 1
    if _reached[wanted] != nth:
        return
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if action == "interrupt":
        raise KeyboardInterrupt
    directory = Path(os.environ.get("VLLM_PATCHER_FAULT_DIR", "."))
    (directory / f"reached-{os.getpid()}").write_text(point)
    while action == "stop" or not (directory / "resume").exists():
        time.sleep(0.01)


def is_package_path(rel: str) -> bool:
    """The one rule for where the tool may write: a relative path inside ``vllm/``, written the
    one way RECORD writes it (``/`` between names; no empty, ``.`` or ``..`` name, no ``\\``), so
    a path names one file and compares equal to its RECORD entry."""
    return package_path_problem(rel) is None


def package_path_problem(rel: str) -> str | None:
    """What is wrong with ``rel`` as a file of the package (for a refusal), or None."""
    parts = rel.split("/")
    if len(parts) < 2 or parts[0] != "vllm" or ".." in parts:
        return f"a path outside vllm/ ({rel})"
    if "\\" in rel or any(p in ("", ".") for p in parts):
        return (
            f"{rel!r}, which is not a plain path (write it as RECORD does: vllm/dir/file.py, "
            "no '.' or empty names, no backslashes)"
        )
    return None


def os_error_message(path: Path | str | None, exc: OSError) -> str:
    """One line for an OS error while touching ``path``: what happened and what to do."""
    where = f" {path}" if path else (f" {exc.filename}" if exc.filename else "")
    if exc.errno == errno.ENOSPC:
        return f"no space left on device while writing{where}; free some space and run again"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (
            f"cannot write{where}: {exc.strerror}; run as the environment's owner or make it "
            "writable"
        )
    return f"file system error{where}: {exc.strerror}"


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` so a reader sees the old bytes or the new, never a mix."""
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    try:
        fault_point("write")
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
        raise NotWritable(os_error_message(path, exc)) from None
    fsync_dir(path.parent)
    fault_point("replaced")


def write_patch_text(path: Path, text: str) -> bool:
    """The one way a file of a patches folder is written (patch.toml, patch.diff, manifest.json,
    series, conflict copies): its folder made, then ``atomic_write``, so an interrupted capture,
    import, port or pin leaves the old file or the new, never a torn one. False when the file
    already holds ``text`` (nothing written)."""
    data = text.encode("utf-8")
    try:
        if path.is_file() and path.read_bytes() == data:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritable(os_error_message(path, exc)) from None
    atomic_write(path, data)
    return True


def remove(path: Path) -> None:
    """Delete ``path`` if present (durably); a failure is a NotWritable with a clear message."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise NotWritable(os_error_message(path, exc)) from None
    fsync_dir(path.parent)


def prune_empty_dirs(top: Path) -> None:
    """Remove empty folders under ``top`` (``top`` itself stays)."""
    if not top.is_dir():
        return
    for folder in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()


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


def ensure_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritable(os_error_message(path, exc)) from None


def read_or_none(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def remove_tree(path: Path) -> None:
    """Delete the folder ``path`` and all it holds, if present (a port's or import's conflict
    copies once resolved); a failure is a NotWritable with a clear message."""
    import shutil  # only the authoring commands delete folders

    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NotWritable(os_error_message(path, exc)) from None
    fsync_dir(path.parent)


def discard_tree(path: Path) -> None:
    """Delete the tool's own scratch folder ``path`` (a staging copy, a spent recovery folder, a
    rehearsal's temp folder), best effort: what cannot go now is left to the next sweep."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def cache_root() -> Path:
    """Where the tool's caches live (downloads, extracted trees, codemod outputs): outside any
    repository, reused across runs; ``VLLM_PATCHER_CACHE`` moves it."""
    env = os.environ.get("VLLM_PATCHER_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "vllm-patcher"
