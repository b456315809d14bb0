"""Pristine release trees: the files the patches touch, taken from a vLLM release wheel.

The extracted tree is a miniature site-packages (the touched ``vllm/`` files plus the wheel's
``dist-info`` with its RECORD and METADATA), so every other part of the tool can treat it exactly
like an installed vLLM through ``--target``.
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import fileops
from ..errors import BadSetting, FetchError
from ..events import Extracted, FetchEvent
from ..fileops import cache_root
from ..releases import public_version

if TYPE_CHECKING:
    from .members import FetchStats


def release_tree(version: str, cache: Path | None = None) -> Path:
    """The extracted site-packages-like tree of one release (may not exist yet)."""
    return (cache or cache_root()) / "src" / version / "site-packages"


def fetch_release(
    version: str,
    paths: Iterable[str],
    cache: Path | None = None,
    *,
    say: Callable[[FetchEvent], None] | None = None,
    wheels: Mapping[str, Path] | None = None,
    stats: FetchStats | None = None,
) -> Path:
    """Return the pristine tree of ``version`` holding at least ``paths`` (every file the
    patches name: ``Catalogue.all_paths``; or fewer), fetching the members the cached tree lacks.

    The members come from ``wheels[version]`` when the user gave that release's wheel
    (``--wheel FILE``: its own tree, keyed by its RECORD, never mixed with the index's), else from
    a wheel already in ``<cache>/wheels``, else from the package index by range requests
    (``fetch.py``). ``stats`` (optional) is filled in with what the fetch cost.

    The tree's ``.complete`` lists the members it was extracted for, so a tree made for fewer
    files is fetched again rather than making a file look absent from the release.
    """
    from . import fetch
    from . import members as wheel

    cache = cache or cache_root()
    given = (wheels or {}).get(version)
    if given is not None:
        digest = wheel.local_wheel(given).record_digest
        tree = cache / "src" / f"{version}-wheel-{digest[:16]}" / "site-packages"
    else:
        tree = release_tree(version, cache)
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
        stats = stats if stats is not None else wheel.FetchStats()
        local = given or _find_wheel(cache / "wheels", version)
        with _staging(tree) as staging:
            if local is not None:
                stats.method = "local"
                try:
                    with zipfile.ZipFile(local) as zf:
                        wheel.extract_checked(zf, version, wanted, staging, str(local), stats)
                except (zipfile.BadZipFile, OSError) as exc:
                    raise FetchError(f"cannot read the wheel {local}: {exc}") from None
                if say:  # after the checks: a refused wheel is one error line, nothing more
                    say(Extracted(len(wanted), version, str(local)))
            else:
                fetch.fetch_members(
                    version, wanted, staging, cache / "wheels", say=say, stats=stats
                )
            # first line the version, then every member asked for (present in the wheel or not)
            (staging / ".complete").write_text("\n".join([version, *wanted]) + "\n")
            if tree.exists():
                fileops.remove_tree(tree)
            staging.rename(tree)
        return tree


def _extracted_for(tree: Path) -> list[str]:
    try:
        lines = (tree / ".complete").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [line for line in lines[1:] if line]


def _covers(tree: Path, wanted: list[str]) -> bool:
    return (tree / ".complete").exists() and set(wanted) <= set(_extracted_for(tree))


@contextlib.contextmanager
def _staging(tree: Path) -> Iterator[Path]:
    """A folder beside ``tree`` to build the new tree in; removed unless renamed into place, so a
    failed or refused fetch leaves the cache as it was."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=tree.parent))
    try:
        yield staging
    finally:
        if staging.exists():
            fileops.discard_tree(staging)


def available_versions() -> list[str]:
    """Every vLLM release on the configured package indexes (pip's or uv's configuration)."""
    from . import index

    return index.available_versions()


def latest_version() -> str:
    """The newest final vLLM release on the configured package indexes."""
    from . import index

    return index.latest_version()


def _find_wheel(wheel_dir: Path, version: str) -> Path | None:
    """A whole wheel already in the cache (put there by hand, or by an older version of the tool)."""
    found = sorted(wheel_dir.glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


def wheels_by_release(files: tuple[Path, ...]) -> dict[str, Path]:
    """``--wheel FILE...`` by the release each holds (its METADATA), every one checked up front."""
    if not files:
        return {}
    from .members import local_wheel

    found: dict[str, Path] = {}
    for path in files:
        version = local_wheel(path).version
        if version in found and found[version].resolve() != path.resolve():
            raise BadSetting(f"two --wheel files for vLLM {version}: {found[version]} and {path}")
        found[version] = path
    return found


def installed_release_wheels(files: tuple[Path, ...], installed: str) -> dict[str, Path]:
    """capture and import read the installed release only: a wheel of another one is a mistake."""
    wheels = wheels_by_release(files)
    release = public_version(installed)
    for version, path in wheels.items():
        if version != release:
            raise BadSetting(
                f"--wheel {path} holds vLLM {version}, but the installed release is {release}"
            )
    return wheels
