"""Release facts about vLLM itself: how a release string reads (its public and base version)
and from which release the allow-list mechanism is gone. Which releases the tool handles is
derived from the patch folders: see ``catalogue.support``."""

from __future__ import annotations

from enum import Enum

from packaging.version import InvalidVersion, Version

from .errors import UnsupportedRelease

LIST_GONE_FROM = Version("0.22.0")  # the allow-list mechanism no longer exists


class Release(str, Enum):
    PATCHABLE = "patchable"
    UPSTREAM = "upstream"


def parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UnsupportedRelease(f"vLLM reports an unreadable version {version!r}") from None


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
