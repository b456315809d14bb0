"""Release-wide facts (which vLLM releases the tool handles at all) and the transform hook a
built-in patch.toml names. The patches themselves are data: see ``catalogue``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from .errors import UnsupportedRelease

if TYPE_CHECKING:
    from .transforms import Rewrite

FIRST_PATCHABLE = Version("0.11.0")
UPSTREAM_FROM = Version("0.18.0")
LIST_GONE_FROM = Version("0.22.0")  # the allow-list mechanism no longer exists
SUPPORTED_RANGE = (
    "0.11.0 to 0.19.x, each patch below its fixed_in (the DeepSeek/Kimi changes are upstream "
    "from 0.18.0, the MiniMax-M2 one from 0.20.0)"
)


class Release(str, Enum):
    PATCHABLE = "patchable"
    UPSTREAM = "upstream"


@dataclass(frozen=True)
class FileChange:
    """One file a patch rewrites, and the transform that rewrites it."""

    path: str
    transform: str  # "module:function" under vllm_patcher.transforms, imported on first use
    needs: str | None = None  # only applicable when the release ships this file

    def applies_to(self, record: dict[str, str]) -> bool:
        return self.path in record and (self.needs is None or self.needs in record)

    def rewrite(self, source: str) -> Rewrite:
        module_name, func_name = self.transform.split(":")
        module = importlib.import_module(f"vllm_patcher.transforms.{module_name}")
        result: Rewrite = getattr(module, func_name)(source, self.path)
        return result


def parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UnsupportedRelease(f"vLLM reports an unreadable version {version!r}") from None


def classify(version: str) -> Release:
    """Which releases this tool patches; refuse the ones before the EAGLE-3 allow-list existed."""
    parsed = parse_version(version)
    v = Version(parsed.base_version)
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
