"""``port NAME --to VERSION``: carry a patch to other releases by a three-way merge per file.

For each file: base = the bytes the patch's diff was made on (the release it is pinned for, with
the patches below it in the series), theirs = base with the diff, ours = the other release's
pristine file with the patches below it there. A clean merge becomes that release's diff and
manifest; a conflict writes nothing for that release and leaves every merged file, markers and
all, under ``NAME/conflicts/vllm-VERSION/`` (with a list of the files it wrote, the only ones
``--continue`` takes) for ``port NAME --to VERSION --continue``. A release that ends pinned is
added to ``releases`` in patch.toml when that does not cover it yet, so apply uses it there.
port only writes the patch folder, never site-packages.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .. import fileops
from ..catalogue.layout import layout
from ..catalogue.model import CONFLICTS, PATCH_TOML, Catalogue, Patch
from ..catalogue.support import first_patchable
from ..catalogue.writer import add_releases, write_pin
from ..diffs import pinned
from ..diffs.merge import merge_three
from ..diffs.text import conflict_marker_lines
from ..errors import BadSetting, PatchFolderError, PortConflict, UnsupportedRelease
from ..install.locate import locate_in_directory
from ..install.record import file_hash
from ..install.target import Target
from ..patching.plan import run_steps
from ..releases import release_of
from ..wheels import sources

CONFLICT_FILES = ".conflict-files.json"  # in conflicts/vllm-VERSION/: the files the conflict wrote
CLEAN, CONFLICT, ABSENT, PINNED_ALREADY = "clean", "conflict", "file absent", "already pinned"
MARKERS = "markers remain"  # --continue: the resolved copies still hold conflict markers
UNCHANGED = "already there"  # the release's own files already hold the change: nothing written


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
        return all(r.outcome in (CLEAN, PINNED_ALREADY, UNCHANGED) for r in self.releases)

    def having(self, outcome: str) -> list[ReleaseOutcome]:
        return [r for r in self.releases if r.outcome == outcome]

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
    fileops.write_patch_text(
        conflicts / ".gitignore", "# work in progress of port/import --continue\n*\n"
    )


def write_pending(pending: Path, texts: Mapping[str, str]) -> None:
    """Leave a conflict's files (by path under site-packages) under ``pending``, replacing an
    earlier attempt, with the list of them that ``--continue`` reads (an editor's swap or backup
    file next to them is not part of the patch)."""
    fileops.remove_tree(pending)
    keep_out_of_git(pending.parent)
    for rel, text in texts.items():
        fileops.write_patch_text(pending / rel, text)
    listing = {"files": sorted(texts)}
    fileops.write_patch_text(pending / CONFLICT_FILES, json.dumps(listing, indent=2) + "\n")


def resolved_files(pending: Path, again: str, known: Collection[str]) -> dict[str, str]:
    """The text of each file the conflict left under ``pending`` (by path under site-packages),
    and nothing else there. Refused when one is missing or not UTF-8 text. A conflict left by an
    earlier version of the tool has no list of its files: then the files there that ``known``
    (the release's files the patch may touch) names are taken. ``again`` is the command to rerun.
    """
    listing = pending / CONFLICT_FILES
    if listing.is_file():
        try:
            rels = json.loads(listing.read_text(encoding="utf-8"))["files"]
            if not isinstance(rels, list) or not all(isinstance(r, str) for r in rels):
                raise TypeError("files is not a list of paths")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PatchFolderError(
                f"{listing} is unreadable ({exc}); run the port or import again to remake {pending}"
            ) from None
        bad = [r for r in rels if not fileops.is_package_path(r)]
        if bad:
            raise PatchFolderError(f"{listing} names a path outside vllm/ ({bad[0]})")
    else:
        rels = sorted(
            rel
            for rel in (p.relative_to(pending).as_posix() for p in pending.rglob("*"))
            if rel in known and (pending / rel).is_file()
        )
    texts = {}
    for rel in rels:
        path = pending / rel
        try:
            texts[rel] = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise PortConflict(
                f"{path} is missing: the conflict left it there to resolve; put it back (or "
                f"start over with the port or import that made {pending}), then run `{again}`"
            ) from None
        except UnicodeDecodeError as exc:
            raise PortConflict(
                f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as "
                f"UTF-8, then run `{again}`"
            ) from None
    return texts


def first_markers(texts: Mapping[str, str]) -> dict[str, int]:
    """Each file that still has conflict markers, and the line of its first one."""
    out = {}
    for rel, text in texts.items():
        marks = conflict_marker_lines(text)
        if marks:
            out[rel] = marks[0]
    return out


def refuse_markers(pending: Path, texts: Mapping[str, str], again: str) -> None:
    marked = first_markers(texts)
    if marked:
        rel, line = next(iter(marked.items()))
        raise PortConflict(
            f"{pending / rel} still has conflict markers (line {line}); resolve them, then run "
            f"`{again}` again"
        )


def drop_if_done(conflicts: Path) -> None:
    if conflicts.is_dir() and all(p.name == ".gitignore" for p in conflicts.iterdir()):
        fileops.remove_tree(conflicts)


def all_releases_of(catalogue: Catalogue, patch: Patch) -> list[str]:
    """The final releases the patch's specifier covers below its fixed_in (from the index)."""
    found = []
    for v in sources.available_versions():
        parsed = Version(v)
        if parsed.is_prerelease or parsed.is_devrelease:
            continue
        if patch.covers(v) and not patch.is_upstream(v) and parsed >= first_patchable(catalogue):
            found.append(v)
    return sorted(found, key=Version)


def releases_to_port(
    catalogue: Catalogue,
    patch: Patch,
    versions: tuple[str, ...],
    all_releases: bool,
    wheels: dict[str, Path],
) -> list[str]:
    """The releases a port carries PATCH to: ``--all`` (every release its specifier covers
    below fixed_in), else the ``--to`` releases and each ``--wheel``'s release unless PATCH is
    pinned there (its source)."""
    if all_releases:
        return all_releases_of(catalogue, patch)
    targets = list(versions) + [
        v for v in wheels if v not in versions and v not in patch.pinned_versions
    ]
    if not targets:
        raise BadSetting(
            f"{patch.name} is already pinned for the release of every --wheel given; name a "
            "release to port to with --to VERSION"
        )
    return targets


def _below(catalogue: Catalogue, name: str) -> Catalogue:
    """The patches before NAME in the series (their bytes are NAME's base)."""
    order = catalogue.order(name)
    return Catalogue(catalogue.patches[:order])


def base_bytes(catalogue: Catalogue, name: str, target: Target, rel: str, start: bytes) -> bytes:
    below = _below(catalogue, name)
    lay = layout(below, target.version, target.record)
    steps = lay.steps.get(rel, [])
    if not steps:
        return start
    after, _ = run_steps(target, rel, steps, start, False, [], set())
    return after


def tree_target(
    version: str, paths: list[str], catalogue: Catalogue, wheels: Mapping[str, Path] | None = None
) -> Target:
    """The pristine tree of ``version`` holding ``paths``, located (``catalogue``: the command's)."""
    tree = sources.fetch_release(version, paths, wheels=wheels)
    return locate_in_directory(str(tree), catalogue)


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
    versions = _releases_to_port_to(catalogue, versions)
    needed = sorted(set(patch.all_paths()) | set(_below(catalogue, name).all_paths()))
    result = PortResult(name, "", [])
    if not resume:
        _refuse_waiting_conflicts(patch, versions)
    if resume:
        result.releases = _continue(catalogue, patch, versions, needed, wheels, result.notes)
    else:
        for version in versions:
            if version in patch.pinned_versions:
                result.releases.append(ReleaseOutcome(version, PINNED_ALREADY))
                continue
            source = _nearest(patch.pinned_versions, version)
            result.source = result.source or source
            result.releases.append(_port_one(catalogue, patch, source, version, needed, wheels))
    _widen_releases(patch, result)
    for r in result.having(UNCHANGED):
        upstream = patch.fixed_in is not None and Version(r.version) >= patch.fixed_in
        result.notes.append(
            f"vLLM {r.version}'s own files already hold {name}'s change: nothing was written for "
            + (
                f"it (it is upstream from {patch.fixed_in})"
                if upstream
                else f'it; if it is upstream from there, set fixed_in = "{r.version}" in '
                f"{patch.folder / PATCH_TOML}"
            )
        )
    for r in result.having(ABSENT):
        result.notes.append(
            f"vLLM {r.version} has no {', '.join(r.files)}: {name} cannot be carried there; "
            "leave that release out"
        )
    return result


def _refuse_waiting_conflicts(patch: Patch, versions: list[str]) -> None:
    """A port without --continue to a release whose conflicts are waiting would write over the
    user's resolved copies: refused before anything is fetched or written."""
    for version in versions:
        pending = patch.folder / CONFLICTS / f"vllm-{version}"
        if pending.exists():
            again = f"vllm-patcher {patch.args(f'port {patch.name} --to {version} --continue')}"
            raise PortConflict(
                f"a port of {patch.name} to vLLM {version} is waiting in {pending}; finish it "
                f"with `{again}`, or delete that folder to merge again from the start"
            )


def _releases_to_port_to(catalogue: Catalogue, versions: list[str]) -> list[str]:
    """Each release once, normalised (``0.17.01`` is 0.17.1); not a version is a usage error, a
    release older than the first one the tool patches is refused before anything is fetched."""
    out = []
    for given in versions:
        try:
            version = Version(given)
        except InvalidVersion:
            raise BadSetting(f"--to {given!r} is not a vLLM version (e.g. 0.17.1)") from None
        first = first_patchable(catalogue)
        if release_of(version) < first:
            raise UnsupportedRelease(
                f"vLLM {version} is older than {first}, the first release vllm-patcher "
                f"patches; port to {first} or later"
            )
        out.append(str(version))
    return list(dict.fromkeys(out))


def _widen_releases(patch: Patch, result: PortResult) -> None:
    """A release that ends pinned but outside ``releases`` is added to it in patch.toml, so
    ``apply`` uses the diff port made there instead of calling the patch not applicable."""
    added = [
        r.version
        for r in result.releases
        if r.outcome in (CLEAN, PINNED_ALREADY) and not patch.covers(r.version)
    ]
    if added:
        now = add_releases(patch.folder / PATCH_TOML, added)
        result.notes.append(
            f"added {', '.join(added)} to releases in {patch.folder / PATCH_TOML} "
            f"(now {json.dumps(now)}), so apply uses {patch.name} there"
        )
    for version in added:
        if patch.is_upstream(version):
            result.notes.append(
                f"vLLM {version} is at or past {patch.name}'s fixed_in ({patch.fixed_in}): "
                "apply treats the patch as upstream there"
            )


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
    src = tree_target(source, needed, catalogue, wheels)
    dst = tree_target(version, needed, catalogue, wheels)
    merged: dict[str, tuple[str, str, int]] = {}  # rel -> (ours, merged text, conflicts)
    absent = []
    for rel in sorted(pin.files):
        if rel not in dst.record:
            absent.append(rel)
            continue
        base = base_bytes(catalogue, patch.name, src, rel, src.path(rel).read_bytes())
        if file_hash(base) != pin.files[rel].before:
            raise PatchFolderError(
                f"{pin.where}: the bytes below it on {rel} of vLLM {source} do not match its "
                "manifest; capture it again"
            )
        theirs = pinned.apply_exact(base.decode("utf-8"), pin.per_file[rel], pin.where)
        ours = base_bytes(catalogue, patch.name, dst, rel, dst.path(rel).read_bytes()).decode(
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
        write_pending(pending, {rel: text for rel, (_, text, _) in merged.items()})
        return ReleaseOutcome(version, CONFLICT, conflicted, str(pending))
    files = [(rel, ours, text) for rel, (ours, text, _) in merged.items() if ours != text]
    if not files:
        return ReleaseOutcome(version, UNCHANGED)
    write_pin(release_dir, version, patch.name, files)
    return ReleaseOutcome(version, CLEAN, [], str(release_dir))


def _continue(
    catalogue: Catalogue,
    patch: Patch,
    versions: list[str],
    needed: list[str],
    wheels: Mapping[str, Path] | None,
    notes: list[str],
) -> list[ReleaseOutcome]:
    """Every release's resolved files are read and checked before any is written (a refusal
    writes nothing); then the releases without markers get their diff. A release already
    pinned with nothing waiting says so (running the same command again is harmless)."""
    outcomes: list[ReleaseOutcome] = []
    ready: list[tuple[str, Path, list[tuple[str, str, str]]]] = []
    for version in versions:
        pending = patch.folder / CONFLICTS / f"vllm-{version}"
        if not pending.is_dir():
            if version in patch.pinned_versions:
                outcomes.append(ReleaseOutcome(version, PINNED_ALREADY))
                continue
            raise BadSetting(
                f"no conflicts are waiting for {patch.name} on vLLM {version} ({pending} is "
                f"absent); run `vllm-patcher {patch.args(f'port {patch.name} --to {version}')}` "
                "first"
            )
        again = f"vllm-patcher {patch.args(f'port {patch.name} --to {version} --continue')}"
        texts = resolved_files(pending, again, needed)
        marked = first_markers(texts)
        if marked:
            outcomes.append(ReleaseOutcome(version, MARKERS, sorted(marked), str(pending)))
            notes.extend(
                f"{pending / rel} still has conflict markers (line {line}); resolve them, then "
                f"run `{again}` again"
                for rel, line in sorted(marked.items())
            )
            continue
        dst = tree_target(version, needed, catalogue, wheels)
        files = []
        for rel, text in texts.items():
            start = dst.path(rel).read_bytes()
            ours = base_bytes(catalogue, patch.name, dst, rel, start).decode("utf-8")
            if text != ours:
                files.append((rel, ours, text))
        if not files:
            raise PortConflict(
                f"the resolved files in {pending} change nothing; {patch.name} would be empty "
                f"on {version}"
            )
        release_dir = patch.folder / f"vllm-{version}"
        outcomes.append(ReleaseOutcome(version, CLEAN, [], str(release_dir)))
        ready.append((version, pending, files))
    for version, pending, files in ready:
        write_pin(patch.folder / f"vllm-{version}", version, patch.name, files)
        fileops.remove_tree(pending)
    drop_if_done(patch.folder / CONFLICTS)
    return outcomes


def not_carried(result: PortResult) -> str | None:
    """The error line of a port that left releases without a diff (conflicts to resolve, or a
    file the release lacks), or None when every release was carried."""
    left = [r for r in result.releases if r.outcome in (CONFLICT, ABSENT)]
    if not left:
        return None
    written = [r.version for r in result.releases if r.outcome == CLEAN]
    return (
        f"{result.name} was not carried to vLLM {', '.join(r.version for r in left)} "
        f"({', '.join(sorted({r.outcome for r in left}))}: see above)"
        + (f"; {', '.join(written)} written" if written else "; no diff written")
    )


def markers_left(patch: Patch, result: PortResult) -> str | None:
    """The refusal line for a ``--continue`` that found markers in some release, or None."""
    marked = result.having(MARKERS)
    if not marked:
        return None
    first = marked[0]
    more = f" (and in {len(marked) - 1} more release(s))" if len(marked) > 1 else ""
    again = patch.args(f"port {patch.name} {' '.join(f'--to {r.version}' for r in marked)}")
    return (
        f"conflict markers remain in {Path(first.folder) / first.files[0]}{more}; resolve them, "
        f"then run `vllm-patcher {again} --continue` again"
    )
