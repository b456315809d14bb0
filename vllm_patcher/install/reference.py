"""What an install's files are judged against: its RECORD (wheel and directory shapes), or the
pinned manifest of its release (editable and source shapes, which have no installer hashes).

The built-in patches of the command's catalogue name the files relied on, the releases pinned
and the pins' pristine hashes; the patches of the user's folders never change the reference."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import releases
from ..catalogue import support
from ..catalogue.layout import builtin_paths, pinned_reference, pinned_versions
from ..errors import PatcherError, TargetNotFound
from .record import HASH_MODE, RecordRow, file_hash
from .target import RECORD_REFERENCE, Target

if TYPE_CHECKING:
    from ..catalogue.model import Catalogue


def by_record(
    version: str,
    name: str,
    files: list[RecordRow] | None,
    site: Path,
    python: Path | None,
    shape: str,
    catalogue: Catalogue,
) -> Target:
    """A wheel-shaped install: the installer's RECORD hashes every file beside it."""
    if files is None:
        raise TargetNotFound(
            f"vLLM {version} has no RECORD: cannot tell pristine files apart; reinstall it with pip"
        )
    record = {}
    for entry in files:
        rel = entry.as_posix()
        if rel.startswith("vllm/") and entry.hash is not None and entry.hash.mode == HASH_MODE:
            record[rel] = entry.hash.value
    builtins = catalogue.builtins()  # they name the files relied on
    unhashed = [
        rel
        for rel in builtin_paths(builtins, version)
        if rel not in record and (site / rel).is_file()
    ]
    if unhashed:
        raise TargetNotFound(
            f"vLLM {version} at {site} has no sha256 for {unhashed[0]} in its RECORD, and its "
            "files are in that directory (not an editable install, which is judged against the "
            "pinned release instead); reinstall vLLM with pip to give it a RECORD"
        )
    _refuse_empty_reference(builtins, record, version, site)
    return Target(
        site_packages=site,
        version=version,
        distribution=name,
        record=record,
        python=python,
        shape=shape,
        reference=RECORD_REFERENCE,
    )


def _refuse_empty_reference(
    builtins: Catalogue, record: dict[str, str], version: str, site: Path
) -> None:
    """Every release from 0.11.0 ships the allow-list file: a reference without it would make
    every patch ``not-applicable`` (a false green)."""
    try:
        patchable = support.classify(builtins, version) is releases.Release.PATCHABLE
    except PatcherError:
        return  # an unsupported release is refused with its own reason later
    if patchable and "vllm/config/speculative.py" not in record:
        raise TargetNotFound(
            f"the RECORD of vLLM {version} at {site} lists no vllm/config/speculative.py, which "
            "every supported release ships, so there is nothing to judge the files against; "
            "reinstall vLLM with pip"
        )


def by_pin(
    package: Path,
    version: str,
    distribution: str,
    python: Path | None,
    shape: str,
    why: str,
    catalogue: Catalogue,
) -> Target:
    """An editable or source install: judge the real files against the pinned release's hashes."""
    builtins = catalogue.builtins()
    root = package.parent
    pinned_record, pinned_as = pinned_reference(builtins, version)
    if pinned_record:
        record = pinned_record
        reference = f"pinned manifest for {pinned_as}"
    elif (
        support.classify(builtins, version) is releases.Release.UPSTREAM
    ):  # refuses releases before 0.11
        # Nothing to patch: status says upstream and verify still checks the real files.
        record = {
            rel: file_hash((root / rel).read_bytes())
            for rel in builtin_paths(builtins, version)
            if (root / rel).is_file()
        }
        reference = f"none needed (vLLM {version} has the changes upstream)"
    else:
        pinned_list = ", ".join(pinned_versions(builtins))
        raise TargetNotFound(
            f"vLLM {version} is {why} at {root}, whose files have no installer hashes, and "
            f"vllm-patcher has no pinned manifest for {version} to tell pristine files from edited "
            f"ones; check out a pinned release ({pinned_list}) or install a release wheel"
        )
    return Target(
        site_packages=root,
        version=version,
        distribution=distribution,
        record=record,
        python=python,
        shape=shape,
        reference=reference,
    )
