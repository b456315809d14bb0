"""The patches: what each one changes, in which files, and for which vLLM releases."""

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
SUPPORTED_RANGE = "0.11.0 to 0.17.x (0.18.0 and newer already have these changes)"

KIMI_MODEL = "vllm/model_executor/models/kimi_k25.py"


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


@dataclass(frozen=True)
class Patch:
    name: str
    summary: str
    changes: tuple[FileChange, ...]

    def applicable(self, record: dict[str, str]) -> tuple[FileChange, ...]:
        return tuple(c for c in self.changes if c.applies_to(record))


PATCHES: tuple[Patch, ...] = (
    Patch(
        "eagle3-whitelist",
        "SpeculativeConfig accepts eagle3 for deepseek_v2/v3 and kimi_k2/k25 targets",
        (FileChange("vllm/config/speculative.py", "whitelist:rewrite"),),
    ),
    Patch(
        "kimi-k25-image-token",
        "the EAGLE proposer reads Kimi-K2.5's media_placeholder_token_id",
        (FileChange("vllm/v1/spec_decode/eagle.py", "image_token:rewrite", needs=KIMI_MODEL),),
    ),
    Patch(
        "supports-eagle3",
        "DeepSeek-V2/V3 and Kimi-K2.5 implement SupportsEagle3 and return aux hidden states",
        (
            FileChange(
                "vllm/model_executor/models/deepseek_v2.py", "supports_eagle3:rewrite_deepseek"
            ),
            FileChange(KIMI_MODEL, "supports_eagle3:rewrite_kimi", needs=KIMI_MODEL),
        ),
    ),
)
PATCH_NAMES = tuple(p.name for p in PATCHES)


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


def all_paths() -> list[str]:
    """Every file any patch can touch, in any release."""
    return [c.path for p in PATCHES for c in p.changes]


def touched_files(record: dict[str, str]) -> list[str]:
    return [c.path for p in PATCHES for c in p.applicable(record)]
