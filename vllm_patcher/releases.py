"""Release facts about vLLM itself: how a release string reads (its public version, and the
release it belongs to) and from which release the allow-list mechanism is gone. Which releases
the tool handles is derived from the patch folders: see ``catalogue.support``."""

from __future__ import annotations

from enum import Enum

from packaging.version import InvalidVersion, Version

from .errors import UnsupportedRelease

LIST_GONE_FROM = Version("0.22.0")  # the allow-list mechanism no longer exists
MIXIN_FROM = "0.18.0"  # the interface has EagleModelMixin: a family captures through it
# vLLM needs Python >= 3.10 (0.11.0 allows 3.9, where an `X | Y` annotation fails at import)
PEP604_FROM = "0.11.1"
# captures made on an earlier pipeline stage reach the drafter (only the families that opt in)
PP_CARRY_FROM = Version("0.30.0")
PP_CARRY_FAMILIES = ("llama", "qwen2", "sarvam")


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


def release_of(version: str | Version) -> Version:
    """The final release a version belongs to: ``0.15.1rc1+cpu`` -> ``0.15.1`` (pre-release, dev
    and local labels dropped). The one place this is worked out; an unreadable string raises
    ``InvalidVersion`` for the caller to word."""
    parsed = version if isinstance(version, Version) else Version(version)
    return Version(parsed.base_version)


def has_allow_list(release: str | Version) -> bool:
    """Whether SpeculativeConfig in ``release`` still checks the target's model_type against its
    EAGLE-3 allow-list (every release before :data:`LIST_GONE_FROM`): the tool's one verdict,
    which the behaviour checks get as ``ctx.allow_list``. An unreadable string raises
    ``InvalidVersion`` for the caller to word."""
    return release_of(release) < LIST_GONE_FROM


def base_version(version: str) -> str:
    """:func:`release_of` as text; an unreadable string is returned as it is."""
    try:
        return str(release_of(version))
    except InvalidVersion:
        return version
