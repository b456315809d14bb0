"""Release facts, owned here only: which vLLM releases the tool handles at all, from which one
the built-ins' changes are upstream, and how a release string reads (its public and base
version). What each patch covers is data in its folder: see ``catalogue``."""

from __future__ import annotations

from enum import Enum

from packaging.version import InvalidVersion, Version

from .errors import UnsupportedRelease

FIRST_PATCHABLE = Version("0.11.0")
UPSTREAM_FROM = Version("0.18.0")
LIST_GONE_FROM = Version("0.22.0")  # the allow-list mechanism no longer exists
SUPPORTED_RANGE = (
    "0.11.0 to 0.31.x, each patch below its fixed_in (the DeepSeek/Kimi changes are upstream "
    "from 0.18.0, the MiniMax-M2 one from 0.20.0, the Granite one from 0.32.0)"
)


class Release(str, Enum):
    PATCHABLE = "patchable"
    UPSTREAM = "upstream"


def parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UnsupportedRelease(f"vLLM reports an unreadable version {version!r}") from None


def classify(version: str) -> Release:
    """Which releases this tool patches; refuse the ones before the EAGLE-3 allow-list existed."""
    parsed = parse_version(version)
    v = Version(base_version(version))
    if v < FIRST_PATCHABLE:
        raise UnsupportedRelease(
            f"vLLM {version} is not supported: vllm-patcher patches {SUPPORTED_RANGE}; "
            "upgrade vLLM to one of those releases"
        )
    unfinished = parsed.is_prerelease or parsed.is_devrelease or parsed.local is not None
    if v >= UPSTREAM_FROM and not (unfinished and v < LIST_GONE_FROM):
        return Release.UPSTREAM
    # A pre-release, dev or local build numbered 0.18-0.21 may predate the upstream changes:
    # treat it as patchable, and let the transforms tell per file whether the change is there.
    return Release.PATCHABLE


def public_version(version: str) -> str:
    """The release without its local label: ``0.15.1+cpu`` -> ``0.15.1`` (the wheel published
    on the index, whose pristine files a local build shares)."""
    return version.split("+", 1)[0]


def base_version(version: str) -> str:
    """The final release a version string belongs to: ``0.15.1rc1+cpu`` -> ``0.15.1``; an
    unreadable string is returned as it is."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version
