"""Pristine release trees: fetch a vLLM wheel with pip and extract the files the patches touch.

The extracted tree is a miniature site-packages (the touched ``vllm/`` files plus the wheel's
``dist-info`` with its RECORD and METADATA), so every other part of the tool can treat it exactly
like an installed vLLM through ``--target``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import FetchError

_DIST_INFO_FILES = ("RECORD", "METADATA")


def cache_root() -> Path:
    """Where downloads and extracted trees live: outside any repository, reused across runs."""
    env = os.environ.get("VLLM_PATCHER_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "vllm-patcher"


def release_tree(version: str, cache: Path | None = None) -> Path:
    """The extracted site-packages-like tree of one release (may not exist yet)."""
    return (cache or cache_root()) / "src" / version / "site-packages"


def fetch_release(
    version: str,
    paths: Iterable[str] | None = None,
    cache: Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    keep_wheel: bool = False,
) -> Path:
    """Return the pristine tree of ``version`` holding at least ``paths`` (default: every file
    a built-in patch names), downloading and extracting it when the cached tree lacks any.

    The tree's ``.complete`` lists the members it was extracted for, so a tree made for fewer
    files is fetched again rather than making a file look absent from the release.
    """
    cache = cache or cache_root()
    tree = release_tree(version, cache)
    if paths is None:
        from .patchset import load_catalogue

        paths = load_catalogue().all_paths()
    wanted = sorted(set(paths))
    if _covers(tree, wanted):
        return tree
    # One fetch per release at a time (parallel test runs share the cache).
    lock_dir = cache / "src"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f".lock-{version}", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _covers(tree, wanted):
            return tree
        wanted = sorted(set(wanted) | set(_extracted_for(tree)))
        return _fetch_locked(version, cache, tree, wanted, progress, keep_wheel)


def _extracted_for(tree: Path) -> list[str]:
    try:
        lines = (tree / ".complete").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [line for line in lines[1:] if line]


def _covers(tree: Path, wanted: list[str]) -> bool:
    return (tree / ".complete").exists() and set(wanted) <= set(_extracted_for(tree))


def _fetch_locked(
    version: str,
    cache: Path,
    tree: Path,
    wanted: list[str],
    progress: Callable[[str], None] | None,
    keep_wheel: bool,
) -> Path:
    wheel_dir = cache / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(wheel_dir, version)
    if wheel is None:
        # pip writes into a folder of this run's own, so a concurrent fetch never sees a partial
        # wheel; the finished one is moved into place in one step.
        download_dir = Path(tempfile.mkdtemp(prefix=".download-", dir=wheel_dir))
        if progress:
            progress(f"downloading vllm=={version} wheel with pip")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"vllm=={version}",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            str(download_dir),
        ]
        if progress is None:
            cmd.append("-q")
        result = subprocess.run(
            cmd,
            stdout=None if progress else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        fetched = _find_wheel(download_dir, version)
        if fetched is not None:
            os.replace(fetched, wheel_dir / fetched.name)
        shutil.rmtree(download_dir, ignore_errors=True)
        wheel = _find_wheel(wheel_dir, version)
        if result.returncode != 0 or wheel is None:
            last = (result.stderr or "").strip().splitlines()[-1:] or ["no wheel"]
            raise FetchError(f"could not download vllm=={version}: {last[0]}")
    if progress:
        progress(f"extracting {wheel.name}")
    _extract(wheel, tree, version, wanted)
    if not keep_wheel:
        wheel.unlink(missing_ok=True)
    return tree


def available_versions() -> list[str]:
    """Every vLLM release on the package index, as pip sees it."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise FetchError("could not ask the package index for vLLM's releases")


def latest_version() -> str:
    """The newest vLLM release on the package index, as pip sees it."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("vllm (") and line.endswith(")"):
            return line[len("vllm (") : -1]
    raise FetchError("could not ask the package index for vLLM's newest release")


def _find_wheel(wheel_dir: Path, version: str) -> Path | None:
    found = sorted(wheel_dir.glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


def _extract(wheel: Path, tree: Path, version: str, members: list[str]) -> None:
    parent = tree.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            wanted = [name for name in members if name in names]
            dist_info = f"vllm-{version}.dist-info"
            wanted += [f"{dist_info}/{n}" for n in _DIST_INFO_FILES if f"{dist_info}/{n}" in names]
            if not any(name.endswith("/RECORD") for name in wanted):
                raise FetchError(f"{wheel.name} has no {dist_info}/RECORD")
            for name in wanted:
                zf.extract(name, staging)
        # first line the version, then every member asked for (present in the wheel or not)
        (staging / ".complete").write_text("\n".join([version, *members]) + "\n")
        if tree.exists():
            shutil.rmtree(tree)
        staging.rename(tree)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
