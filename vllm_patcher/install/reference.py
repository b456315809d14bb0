"""What an install's files are judged against: its RECORD (wheel and directory shapes), or the
pinned manifest of its release (editable and source shapes, which have no installer hashes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TargetNotFound
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
    from ..catalogue.folders import load_catalogue
    from ..catalogue.layout import builtin_paths  # the built-ins name the files we rely on

    builtins = (
        load_catalogue()
    )  # locate loads the built-ins itself: it is not handed the command's catalogue
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
    from .. import releases
    from ..catalogue import support
    from ..errors import PatcherError

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
    package: Path, version: str, distribution: str, python: Path | None, shape: str, why: str
) -> Target:
    """An editable or source install: judge the real files against the pinned release's hashes."""
    from .. import releases
    from ..catalogue import support
    from ..catalogue.folders import load_catalogue
    from ..catalogue.layout import builtin_paths, pinned_reference, pinned_versions

    builtins = (
        load_catalogue()
    )  # locate loads the built-ins itself: it is not handed the command's catalogue
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
