"""The one writer of patch folders (``folders`` reads them): a patch's ``patch.toml`` (made, or
its releases widened), a folder's ``series`` file, and a pin's ``patch.diff`` and
``manifest.json``. Every file goes through ``fileops.write_patch_text`` (atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.version import Version

from .. import fileops
from ..diffs.pinned import make_diff
from ..install.record import file_hash
from .folders import read_toml
from .model import DIFF, MANIFEST, PATCH_TOML, SERIES


def _write_toml(path: Path, fields: dict[str, Any]) -> None:
    import tomli_w  # only the commands that write patch.toml need it; status and apply never do

    fileops.write_patch_text(path, tomli_w.dumps(fields))


def write_patch_toml(
    patch_dir: Path, name: str, version: str, releases: str | None, summary: str | None
) -> None:
    """A new patch's patch.toml; an existing one keeps what the options do not replace."""
    path = patch_dir / PATCH_TOML
    if path.exists() and releases is None and summary is None:
        return
    fields: dict[str, str | list[str]] = {
        "name": name,
        "summary": summary or f"captured from an edit of vLLM {version}",
        "releases": releases or f"=={version}",
    }
    if path.exists():
        old = read_toml(path)
        fields["summary"] = summary or str(old.get("summary", fields["summary"]))
        # a list of specifiers (port adds the releases it ports to) stays a list
        kept = old.get("releases", fields["releases"])
        fields["releases"] = releases or (kept if isinstance(kept, list) else str(kept))
        fixed = old.get("fixed_in")
        if fixed:
            fields["fixed_in"] = str(fixed)
    _write_toml(path, fields)


def add_releases(toml: Path, versions: list[str]) -> list[str]:
    """Rewrite ``releases`` in ``toml`` as a list: what it covered, and ``==V`` for each of
    ``versions`` (PEP 440 has no "or"; a range widened to the new release would also take in the
    releases between, which have no diff). A list of ``==`` pins only is kept in version order."""
    data = read_toml(toml)
    old = data.get("releases", "")
    entries = [old] if isinstance(old, str) else [str(e) for e in old]
    entries += [f"=={v}" for v in sorted(versions, key=Version) if f"=={v}" not in entries]
    pins = [_pinned_release(e) for e in entries]
    if all(pins):
        entries = [f"=={v}" for v in sorted({str(v) for v in pins if v}, key=Version)]
    data["releases"] = entries
    _write_toml(toml, data)
    return entries


def _pinned_release(entry: str) -> Version | None:
    """The release of an ``==X`` specifier (no wildcard), else None."""
    from packaging.specifiers import SpecifierSet

    specs = list(SpecifierSet(entry))
    if len(specs) != 1 or specs[0].operator != "==" or specs[0].version.endswith(".*"):
        return None
    return Version(specs[0].version)


def add_to_series(folder: Path, name: str) -> None:
    """A folder with a ``series`` file loads only what it lists: NAME goes at its end."""
    series = folder / SERIES
    if not series.is_file():
        return
    text = series.read_text(encoding="utf-8")
    if name in (line.split("#", 1)[0].strip() for line in text.splitlines()):
        return
    fileops.write_patch_text(
        series, text + ("" if not text or text.endswith("\n") else "\n") + f"{name}\n"
    )


def write_pin(folder: Path, version: str, patch: str, files: list[tuple[str, str, str]]) -> bool:
    """Write one patch's release folder; ``files`` = (rel, before text, after text).

    Returns True when anything on disk changed (pinning an unchanged tree rewrites nothing).
    """
    entries = {}
    parts = []
    for rel, before, after in sorted(files):
        parts.append(make_diff(rel, before, after))
        entries[rel] = {
            "before": file_hash(before.encode("utf-8")),
            "after": file_hash(after.encode("utf-8")),
        }
    manifest = {"vllm_version": version, "patch": patch, "files": entries}
    wanted = {DIFF: "".join(parts), MANIFEST: json.dumps(manifest, indent=2) + "\n"}
    changed = False
    for name, text in wanted.items():
        changed |= fileops.write_patch_text(folder / name, text)
    return changed
