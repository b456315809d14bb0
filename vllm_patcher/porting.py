"""``port NAME --to VERSION``: carry a patch to other releases by a three-way merge per file.

For each file: base = the bytes the patch's diff was made on (the release it is pinned for, with
the patches below it in the series), theirs = base with the diff, ours = the other release's
pristine file with the patches below it there. A clean merge becomes that release's diff and
manifest; a conflict writes nothing for that release and leaves every merged file, markers and
all, under ``NAME/conflicts/vllm-VERSION/`` for ``port NAME --to VERSION --continue``.
port only writes the patch folder, never site-packages.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from . import pinned, sources
from .diffmerge import conflict_marker_lines, merge_three
from .errors import BadSetting, PatchFolderError, PortConflict
from .patchset import Catalogue, Patch, layout
from .plan import _run
from .target import Target, file_hash, locate_in_directory

CONFLICTS = "conflicts"
CLEAN, CONFLICT, ABSENT, PINNED_ALREADY = "clean", "conflict", "file absent", "already pinned"


@dataclass
class ReleaseOutcome:
    version: str
    outcome: str
    files: list[str] = field(default_factory=list)  # conflicted or absent files
    folder: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "version": self.version,
            "outcome": self.outcome,
            "files": self.files,
            "folder": self.folder,
        }


@dataclass
class PortResult:
    name: str
    source: str
    releases: list[ReleaseOutcome]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.outcome in (CLEAN, PINNED_ALREADY) for r in self.releases)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "ported_from": self.source,
            "ok": self.ok,
            "releases": [r.to_dict() for r in self.releases],
            "notes": self.notes,
        }


def keep_out_of_git(conflicts: Path) -> None:
    """Conflict copies are work in progress: a ``.gitignore`` keeps ``git add`` of the patches
    folder from committing them."""
    conflicts.mkdir(parents=True, exist_ok=True)
    (conflicts / ".gitignore").write_text("# work in progress of port/import --continue\n*\n")


def resolved_files(pending: Path, again: str) -> dict[str, Path]:
    """The fixed copies waiting under ``pending`` (by path under site-packages, ``.rej`` left
    out); refused while any still has conflict markers. ``again`` is the command to rerun."""
    fixed = {
        p.relative_to(pending).as_posix(): p
        for p in sorted(pending.rglob("*"))
        if p.is_file() and p.suffix != ".rej"
    }
    for path in fixed.values():
        marks = conflict_marker_lines(path.read_text(encoding="utf-8"))
        if marks:
            raise PortConflict(
                f"{path} still has conflict markers (line {marks[0]}); resolve them, then run "
                f"`{again}` again"
            )
    return fixed


def drop_if_done(conflicts: Path) -> None:
    if conflicts.is_dir() and all(p.name == ".gitignore" for p in conflicts.iterdir()):
        shutil.rmtree(conflicts)


def all_releases(patch: Patch) -> list[str]:
    """The final releases the patch's specifier covers below its fixed_in (from the index)."""
    found = []
    for v in sources.available_versions():
        parsed = Version(v)
        if parsed.is_prerelease or parsed.is_devrelease:
            continue
        if patch.covers(v) and not patch.is_upstream(v) and parsed >= Version("0.11.0"):
            found.append(v)
    return sorted(found, key=Version)


def _below(catalogue: Catalogue, name: str) -> Catalogue:
    """The patches before NAME in the series (their bytes are NAME's base)."""
    order = catalogue.order(name)
    return Catalogue(catalogue.patches[:order])


def _base_bytes(catalogue: Catalogue, name: str, target: Target, rel: str, start: bytes) -> bytes:
    below = _below(catalogue, name)
    lay = layout(below, target.version, target.record)
    steps = lay.steps.get(rel, [])
    if not steps:
        return start
    after, _ = _run(target, rel, steps, start, False, [], set())
    return after


def _tree_target(
    version: str, paths: list[str], wheels: Mapping[str, Path] | None = None
) -> Target:
    return locate_in_directory(str(sources.fetch_release(version, paths, wheels=wheels)))


def port(
    catalogue: Catalogue,
    name: str,
    versions: list[str],
    resume: bool = False,
    wheels: Mapping[str, Path] | None = None,
) -> PortResult:
    patch = catalogue.get(name)
    if patch is None:
        raise BadSetting(f"no patch named {name!r}; known: {', '.join(catalogue.names)}")
    if not patch.pinned_versions:
        raise PatchFolderError(
            f"{name} has no pinned diff to port from; capture or import it first"
        )
    needed = sorted(set(patch.all_paths()) | set(_below(catalogue, name).all_paths()))
    result = PortResult(name, "", [])
    for version in versions:
        if not patch.covers(version):
            result.notes.append(
                f"vLLM {version} is outside {name}'s releases ({patch.releases}); widen "
                f"releases in {patch.folder / 'patch.toml'} for apply to use it"
            )
        if resume:
            result.releases.append(_continue(catalogue, patch, version, needed, wheels))
            continue
        if version in patch.pinned_versions:
            result.releases.append(ReleaseOutcome(version, PINNED_ALREADY))
            continue
        source = _nearest(patch.pinned_versions, version)
        result.source = result.source or source
        result.releases.append(_port_one(catalogue, patch, source, version, needed, wheels))
    return result


def _nearest(pinned_versions: tuple[str, ...], version: str) -> str:
    """The pinned release closest to ``version`` (same minor first), the older one on a tie:
    neighbouring releases share the most code, so their merge has the fewest conflicts."""
    want = Version(version)

    def distance(v: str) -> tuple[int, int, int]:
        have = Version(v)
        return (
            abs(have.major - want.major) * 1000 + abs(have.minor - want.minor),
            abs(have.micro - want.micro),
            int(have > want),
        )

    return min(pinned_versions, key=distance)


def _port_one(
    catalogue: Catalogue,
    patch: Patch,
    source: str,
    version: str,
    needed: list[str],
    wheels: Mapping[str, Path] | None = None,
) -> ReleaseOutcome:
    pin = patch.pin(source)
    assert pin is not None
    src = _tree_target(source, needed, wheels)
    dst = _tree_target(version, needed, wheels)
    merged: dict[str, tuple[str, str, int]] = {}  # rel -> (ours, merged text, conflicts)
    absent = []
    for rel in sorted(pin.files):
        if rel not in dst.record:
            absent.append(rel)
            continue
        base = _base_bytes(catalogue, patch.name, src, rel, src.path(rel).read_bytes())
        if file_hash(base) != pin.files[rel].before:
            raise PatchFolderError(
                f"{pin.where}: the bytes below it on {rel} of vLLM {source} do not match its "
                "manifest; capture it again"
            )
        theirs = pinned.apply_exact(base.decode("utf-8"), pin.per_file[rel], pin.where)
        ours = _base_bytes(catalogue, patch.name, dst, rel, dst.path(rel).read_bytes()).decode(
            "utf-8"
        )
        m = merge_three(
            base.decode("utf-8"),
            theirs,
            ours,
            labels=(f"vllm {version}", f"vllm {source}", f"{patch.name} (from {source})"),
        )
        merged[rel] = (ours, m.text, m.conflicts)
    if absent:
        return ReleaseOutcome(version, ABSENT, absent)
    conflicted = [rel for rel, (_, _, n) in merged.items() if n]
    release_dir = patch.folder / f"vllm-{version}"
    pending = patch.folder / CONFLICTS / f"vllm-{version}"
    if conflicted:
        if pending.exists():
            shutil.rmtree(pending)
        keep_out_of_git(pending.parent)
        for rel, (_, text, _) in merged.items():
            out = pending / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        return ReleaseOutcome(version, CONFLICT, conflicted, str(pending))
    files = [(rel, ours, text) for rel, (ours, text, _) in merged.items() if ours != text]
    pinned.write_pin(release_dir, version, patch.name, files)
    return ReleaseOutcome(version, CLEAN, [], str(release_dir))


def _continue(
    catalogue: Catalogue,
    patch: Patch,
    version: str,
    needed: list[str],
    wheels: Mapping[str, Path] | None = None,
) -> ReleaseOutcome:
    pending = patch.folder / CONFLICTS / f"vllm-{version}"
    if not pending.is_dir():
        raise BadSetting(
            f"no conflicts are waiting for {patch.name} on vLLM {version} ({pending} is absent); "
            f"run `vllm-patcher {patch.args(f'port {patch.name} --to {version}')}` first"
        )
    again = f"vllm-patcher {patch.args(f'port {patch.name} --to {version} --continue')}"
    fixed = resolved_files(pending, again)
    dst = _tree_target(version, needed, wheels)
    files = []
    for rel, path in fixed.items():
        ours = _base_bytes(catalogue, patch.name, dst, rel, dst.path(rel).read_bytes()).decode(
            "utf-8"
        )
        text = path.read_text(encoding="utf-8")
        if text != ours:
            files.append((rel, ours, text))
    if not files:
        raise PortConflict(
            f"the resolved files in {pending} change nothing; {patch.name} would be empty on {version}"
        )
    release_dir = patch.folder / f"vllm-{version}"
    pinned.write_pin(release_dir, version, patch.name, files)
    shutil.rmtree(pending)
    drop_if_done(patch.folder / CONFLICTS)
    return ReleaseOutcome(version, CLEAN, [], str(release_dir))
