"""The patches as data: folders of ``patch.toml``, pinned diffs per release, and checks.

A patch folder::

    NAME/patch.toml                 name, summary, releases (a PEP 440 specifier, or a list of
                                    them: a release any one matches), fixed_in
    NAME/vllm-VERSION/patch.diff    the change for that release (``a/vllm/...`` paths)
    NAME/vllm-VERSION/manifest.json sha256 of every touched file before and after the diff
    NAME/checks/*.py                behaviour checks verify runs in the target's interpreter

The built-ins ship in the wheel; ``--patches DIR`` (or ``VLLM_PATCHER_PATCHES``, or
``[tool.vllm-patcher] patches`` in ./pyproject.toml) adds folders of the user's own. Patches that
touch one file form a series in catalogue order (built-ins in their ``series`` file's order, then
each folder in the order given, names sorted within a folder unless it has a ``series`` file):
each diff is made against the bytes the patches before it produce.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .catalog import LIST_GONE_FROM, FileChange
from .errors import BadSetting, PatchFolderError

PATCH_TOML = "patch.toml"
DIFF = "patch.diff"
MANIFEST = "manifest.json"
SERIES = "series"
BUILTIN = "built-in"
_NAME_FIRST = set("abcdefghijklmnopqrstuvwxyz0123456789")
_NAME_CHARS = _NAME_FIRST | set("-_.")


def valid_patch_name(name: str) -> bool:
    """The one rule for a patch's name, which is also its folder's name: lower-case letters,
    digits, '-', '_' and '.', starting with a letter or a digit (never '.', '..', a path or a
    hidden folder)."""
    return bool(name) and name[0] in _NAME_FIRST and not set(name) - _NAME_CHARS


# The rule in words, for every refusal of a name (the loader's and the commands' that take NAME).
NAME_RULE = (
    "a patch name is lower-case letters, digits, '-', '_' and '.', starting with a letter or a "
    "digit (e.g. my-fix)"
)


@dataclass(frozen=True)
class Releases:
    """``releases`` of a patch.toml: one PEP 440 specifier, or a list of them (PEP 440 has no
    "or"): a release is covered when any one of them matches it."""

    sets: tuple[SpecifierSet, ...]

    def contains(self, version: str) -> bool:
        return any(s.contains(version, prereleases=True) for s in self.sets)

    def __iter__(self) -> Iterator[Specifier]:
        for s in self.sets:
            yield from s

    def __str__(self) -> str:
        return " || ".join(str(s) for s in self.sets)

    def __bool__(self) -> bool:  # "" (any release) is falsy, as an empty SpecifierSet is
        return bool(str(self))


def admits_a_release(spec: SpecifierSet) -> bool:
    """Whether any final release (what ``covers`` compares: a build's base version) satisfies
    ``spec``; ``">=1.0,<0.5"`` does not.

    The final releases a specifier admits form intervals whose ends are its own versions (a
    wildcard or ``~=`` also ends where its prefix does), so a non-empty piece holds one of: such a
    boundary, a version just above one (the boundary with a ``.0...0.1`` finer than every
    boundary appended), or 0. Checking those candidates is exact.
    """
    bounds = {Version("0")}
    for s in spec:
        text = s.version.removesuffix(".*")
        try:
            v = Version(text)
        except InvalidVersion:  # "===" with a string no release is named
            continue
        release = v.release
        bounds.add(Version(v.base_version))
        if s.version.endswith(".*"):
            bounds.add(_with_release(v, (*release[:-1], release[-1] + 1)))
        if s.operator == "~=" and len(release) > 1:
            bounds.add(_with_release(v, (*release[:-2], release[-2] + 1)))
    finest = max(len(b.release) for b in bounds) + 1
    candidates = set(bounds)
    for b in bounds:
        pad = (0,) * (finest - len(b.release))
        candidates.add(_with_release(b, (*b.release, *pad, 1)))
    return any(spec.contains(str(c), prereleases=True) for c in candidates)


def _with_release(v: Version, release: tuple[int, ...]) -> Version:
    epoch = f"{v.epoch}!" if v.epoch else ""
    return Version(epoch + ".".join(map(str, release)))


@dataclass(frozen=True)
class PinnedFile:
    """One file of a pinned diff: its hash before (the bytes the earlier patches leave) and after."""

    path: str
    before: str
    after: str


@dataclass(frozen=True)
class Pin:
    """One patch's pinned diff for one release."""

    patch: str
    version: str
    folder: Path
    files: dict[str, PinnedFile]

    @property
    def where(self) -> str:
        return f"{self.patch}/{self.folder.name}/{DIFF}"

    @functools.cached_property
    def per_file(self) -> dict[str, str]:
        """Each touched file's own diff text; the diff must name exactly the manifest's files."""
        from .pinned import split_by_file

        try:
            text = (self.folder / DIFF).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PatchFolderError(f"cannot read {self.folder / DIFF}: {exc}") from None
        out = split_by_file(text, str(self.folder / DIFF))
        if set(out) != set(self.files):
            raise PatchFolderError(
                f"{self.folder / MANIFEST} lists {sorted(self.files)} but {DIFF} changes "
                f"{sorted(out)}; the manifest does not match its diff"
            )
        return out


@dataclass(frozen=True)
class Patch:
    """One patch folder, loaded."""

    name: str
    summary: str
    releases: Releases
    fixed_in: Version | None
    folder: Path
    origin: str  # "built-in", or the folder it was given in
    transforms: tuple[FileChange, ...] = ()
    pinned_versions: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        return self.origin == BUILTIN

    def args(self, rest: str) -> str:
        """Arguments that reach this patch again: ``--patches ORIGIN`` for a patch of your own."""
        return rest if self.builtin else f"--patches {self.origin} {rest}"

    def covers(self, version: str) -> bool:
        return self.releases.contains(_base(version))

    def is_upstream(self, version: str) -> bool:
        return self.fixed_in is not None and Version(_base(version)) >= self.fixed_in

    def pin(self, version: str) -> Pin | None:
        """The pinned diff for ``version``; a local build (``0.15.1+cpu``) falls back to 0.15.1."""
        public = version.split("+", 1)[0]
        for candidate in dict.fromkeys((version, public)):
            if candidate in self.pinned_versions:
                return _load_pin(self.name, candidate, self.folder / f"vllm-{candidate}")
        return None

    def check_files(self) -> list[Path]:
        return sorted((self.folder / "checks").glob("*.py"))

    def applicable_transforms(self, record: dict[str, str]) -> tuple[FileChange, ...]:
        return tuple(c for c in self.transforms if c.applies_to(record))

    def files_for(self, version: str, record: dict[str, str]) -> list[str]:
        """The files this patch touches on ``version`` (pinned, else its transforms')."""
        pin = self.pin(version)
        if pin is not None:
            return sorted(pin.files)
        return [c.path for c in self.applicable_transforms(record)]

    def all_paths(self) -> list[str]:
        paths = {c.path for c in self.transforms}
        for version in self.pinned_versions:
            pin = self.pin(version)
            if pin is not None:
                paths.update(pin.files)
        return sorted(paths)


@dataclass(frozen=True)
class Catalogue:
    """Every patch this run knows, in series order, and which of them are selected."""

    patches: tuple[Patch, ...]
    selected: frozenset[str] = field(default_factory=frozenset)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)

    def get(self, name: str) -> Patch | None:
        return next((p for p in self.patches if p.name == name), None)

    def order(self, name: str) -> int:
        for i, p in enumerate(self.patches):
            if p.name == name:
                return i
        return len(self.patches)

    def select(self, names: Iterable[str]) -> Catalogue:
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self.names]
        if unknown:
            raise BadSetting(
                f"no patch named {unknown[0]!r}; known: {', '.join(self.names)} "
                "(add a folder with --patches DIR)"
            )
        return Catalogue(self.patches, frozenset(wanted))

    def is_selected(self, name: str) -> bool:
        return not self.selected or name in self.selected

    def all_paths(self) -> list[str]:
        """Every file any patch touches in any release (reads every manifest: not for status)."""
        return sorted({rel for p in self.patches for rel in p.all_paths()})

    def paths_for(self, version: str) -> list[str]:
        """The files the patches may touch on ``version``: its pins' and the codemods' files."""
        paths = {c.path for p in self.patches for c in p.transforms}
        for p in self.patches:
            pin = p.pin(version)
            if pin is not None:
                paths.update(pin.files)
        return sorted(paths)

    def user_folders(self) -> list[Path]:
        return list(dict.fromkeys(Path(p.origin) for p in self.patches if not p.builtin))


def _base(version: str) -> str:
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def builtin_root() -> Path:
    """The shipped patches folder (the ``vllm_patcher.patches`` package).

    ``VLLM_PATCHER_PATCHES_DIR`` replaces it (tests point it at a copy or an empty folder).
    """
    override = os.environ.get("VLLM_PATCHER_PATCHES_DIR")
    if override:
        return Path(override)
    here = Path(__file__).resolve().parent
    shipped = here / "patches"  # a wheel install puts the package data here
    if (shipped / SERIES).is_file():
        return shipped
    from importlib.util import find_spec

    spec = find_spec("vllm_patcher.patches")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return here.parent / "patches"  # a source tree that was never installed


def user_folders(
    given: tuple[Path, ...] = (), cwd: Path | None = None
) -> tuple[list[Path], list[str]]:
    """The user's patch folders and ``select`` list: --patches, else the env var, else pyproject."""
    if given:
        return [Path(p) for p in given], []
    env = os.environ.get("VLLM_PATCHER_PATCHES")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p], []
    project = (cwd or Path.cwd()) / "pyproject.toml"
    if not project.is_file():
        return [], []
    table = _read_toml(project).get("tool", {}).get("vllm-patcher", {})
    if not isinstance(table, dict):
        raise PatchFolderError(f"{project}: [tool.vllm-patcher] must be a table")
    folders = table.get("patches", [])
    select = table.get("select", [])
    if not _str_list(folders) or not _str_list(select):
        raise PatchFolderError(
            f"{project}: [tool.vllm-patcher] patches and select must be lists of strings"
        )
    return [project.parent / f for f in folders], list(select)


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def load_catalogue(folders: Iterable[Path] = (), select: Iterable[str] = ()) -> Catalogue:
    """The built-ins plus every patch in ``folders``; a clash or a malformed folder is refused."""
    patches = list(_load_folder(builtin_root(), BUILTIN))
    for folder in folders:
        if folder.exists() and not folder.is_dir():
            raise PatchFolderError(
                f"patch folder {folder} is not a folder; give --patches the folder that holds "
                "your patches"
            )
        if not folder.is_dir():
            raise PatchFolderError(
                f"patch folder {folder} does not exist; create it (mkdir -p {folder}) "
                "or fix the path"
            )
        patches.extend(_load_folder(folder, str(folder)))
    seen: dict[str, Patch] = {}
    for p in patches:
        if p.name in seen:
            raise PatchFolderError(
                f"two patches are named {p.name!r} ({seen[p.name].folder} and {p.folder}); "
                "rename one of the folders"
            )
        seen[p.name] = p
    catalogue = Catalogue(tuple(patches))
    select = list(select)
    return catalogue.select(select) if select else catalogue


def _load_folder(root: Path, origin: str) -> list[Patch]:
    return list(_load_folder_cached(root.resolve() if origin != BUILTIN else root, origin))


@functools.cache
def _load_folder_cached(root: Path, origin: str) -> tuple[Patch, ...]:
    if origin != BUILTIN:
        _refuse_top_links(root)
    names = _series(root)
    return tuple(_load_patch(root / name, origin) for name in names)


def _refuse_top_links(root: Path) -> None:
    """A link among a patches folder's own entries (a patch folder, the series file) would load
    a patch from wherever it points; patch folders' contents are checked in ``_load_patch``."""
    for child in root.iterdir():
        if child.is_symlink():
            raise PatchFolderError(
                f"{child} is a symbolic link; a patches folder must hold plain folders and files "
                "(copy the target in instead)"
            )


def _series(root: Path) -> list[str]:
    listed = root / SERIES
    if listed.is_file():
        names = [
            line.split("#", 1)[0].strip()
            for line in listed.read_text(encoding="utf-8").splitlines()
        ]
        names = [n for n in names if n]
        for n in names:
            if not valid_patch_name(n):
                raise PatchFolderError(
                    f"{listed} names {n!r}, which is not a patch name (lower-case letters, "
                    f"digits, '-', '_' and '.'); it lists the patch folders inside {root} by name"
                )
            if not (root / n / PATCH_TOML).is_file():
                raise PatchFolderError(
                    f"{listed} names {n!r}, but {root / n / PATCH_TOML} is missing"
                )
        return names
    found = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        if not (child / PATCH_TOML).is_file():
            raise PatchFolderError(
                f"{child} has no {PATCH_TOML}; a patches folder holds one folder per patch "
                "(`vllm-patcher capture NAME` makes one)"
            )
        found.append(child.name)
    return found


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except (OSError, ValueError) as exc:
        raise PatchFolderError(f"{path} is not valid TOML: {exc}") from None


def _load_patch(folder: Path, origin: str) -> Patch:
    where = folder / PATCH_TOML
    if origin != BUILTIN:
        _refuse_links(folder)
    data = _read_toml(where)
    name = data.get("name")
    if name != folder.name:
        raise PatchFolderError(
            f"{where}: name = {name!r} must equal the folder's name {folder.name!r}"
        )
    if not isinstance(name, str) or not valid_patch_name(name):
        raise PatchFolderError(f"{where}: name {name!r} is not a patch name; {NAME_RULE}")
    summary = data.get("summary", "")
    fixed_in = data.get("fixed_in")
    if not isinstance(summary, str):
        raise PatchFolderError(f"{where}: summary must be a string")
    spec = _releases(data.get("releases", ""), where)
    try:
        fixed = Version(fixed_in) if fixed_in is not None else None
    except (InvalidVersion, TypeError):
        raise PatchFolderError(f"{where}: fixed_in = {fixed_in!r} is not a version") from None
    unknown = set(data) - {"name", "summary", "releases", "fixed_in", "transform"}
    if unknown:
        raise PatchFolderError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    transforms = _transforms(data.get("transform", []), where, origin)
    versions = tuple(
        sorted(
            (
                p.name.removeprefix("vllm-")
                for p in folder.glob("vllm-*")
                if (p / MANIFEST).is_file()
            ),
            key=_version_key,
        )
    )
    return Patch(name, summary, spec, fixed, folder, origin, transforms, versions)


def _releases(raw: object, where: Path) -> Releases:
    """A specifier string, or a list of them; each must parse and admit some release."""
    if isinstance(raw, str):
        items = [raw]
    elif isinstance(raw, list) and all(isinstance(r, str) for r in raw):
        items = list(raw)
    else:
        raise PatchFolderError(f"{where}: releases must be a string or a list of strings")
    sets = []
    for item in items:
        try:
            spec = SpecifierSet(item)
        except InvalidSpecifier:
            raise PatchFolderError(
                f'{where}: releases = {item!r} is not a PEP 440 specifier (e.g. ">=0.11.1")'
            ) from None
        if not admits_a_release(spec):
            raise PatchFolderError(
                f"{where}: releases = {item!r} matches no release; fix the range (a lower "
                "bound below the upper one)"
            )
        sets.append(spec)
    if not sets:
        raise PatchFolderError(
            f'{where}: releases = [] matches no release; name some (e.g. ["==0.15.1"])'
        )
    return Releases(tuple(sets))


def _transforms(raw: object, where: Path, origin: str) -> tuple[FileChange, ...]:
    if not raw:
        return ()
    if origin != BUILTIN:
        raise PatchFolderError(
            f"{where}: [[transform]] names code inside vllm-patcher and is only for built-in "
            "patches; a patch of your own is its pinned diffs"
        )
    if not isinstance(raw, list):
        raise PatchFolderError(f"{where}: transform must be an array of tables")
    out = []
    for t in raw:
        if not isinstance(t, dict) or not isinstance(t.get("file"), str):
            raise PatchFolderError(f"{where}: each [[transform]] needs file and codemod")
        out.append(FileChange(t["file"], str(t["codemod"]), t.get("needs")))
    return tuple(out)


def _refuse_links(folder: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in (*dirnames, *filenames):
            if os.path.islink(os.path.join(dirpath, n)):
                raise PatchFolderError(
                    f"{os.path.join(dirpath, n)} is a symbolic link; a patch folder must hold "
                    "plain files (copy the target in instead)"
                )


def _version_key(version: str) -> tuple[Any, ...]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


@functools.cache
def _load_pin(patch: str, version: str, folder: Path) -> Pin:
    from .fileops import is_package_path, package_path_problem

    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = {
            rel: PinnedFile(rel, str(v["before"]), str(v["after"]))
            for rel, v in data["files"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PatchFolderError(
            f"manifest {path} is unreadable ({exc}); restore the patch folder"
        ) from None
    for rel in files:
        if not is_package_path(rel):
            raise PatchFolderError(f"{path} names {package_path_problem(rel)}; refusing to use it")
    if not files:
        raise PatchFolderError(f"{path} lists no files; delete {folder} or capture again")
    return Pin(patch, version, folder, files)


def pinned_versions(catalogue: Catalogue | None = None) -> list[str]:
    """Every release at least one patch has a pinned diff for."""
    catalogue = catalogue or load_catalogue()
    versions = {v for p in catalogue.patches for v in p.pinned_versions}
    return sorted(versions, key=_version_key)


class Verdict(str, Enum):
    """What one patch means for one release, before any file is read."""

    APPLICABLE = "applicable"
    UPSTREAM = "upstream"  # the release is at or past the patch's fixed_in
    OUTSIDE = "outside"  # the release is outside the patch's releases specifier
    NO_FILES = "no-files"  # the release has none of the files the patch touches
    UNPORTED = "unported"  # in range, but no diff for this release (and no transform)


@dataclass(frozen=True)
class Step:
    """One patch's change to one file on one release: a pinned diff, a transform, or both."""

    patch: str
    path: str
    pinned: PinnedFile | None
    pin: Pin | None
    transform: FileChange | None


@dataclass
class Layout:
    """The catalogue laid over one release: a verdict per patch and the series per file."""

    version: str
    catalogue: Catalogue
    verdicts: dict[str, Verdict]
    steps: dict[str, list[Step]]  # file -> steps in series order (selected or recorded patches)

    def files_of(self, patch: str) -> list[str]:
        return [rel for rel, steps in self.steps.items() if any(s.patch == patch for s in steps)]

    @property
    def all_upstream(self) -> bool:
        return not self.steps and all(
            v in (Verdict.UPSTREAM, Verdict.OUTSIDE, Verdict.NO_FILES)
            for v in self.verdicts.values()
        )


def _unfinished(version: str) -> bool:
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return v.is_prerelease or v.is_devrelease or v.local is not None


def layout(
    catalogue: Catalogue,
    version: str,
    record: dict[str, str],
    recorded: dict[str, list[str]] | None = None,
) -> Layout:
    """Lay the catalogue over ``version``; ``recorded`` maps a file to the patches applied on it.

    A file's series holds the selected patches plus those already recorded on it (apply keeps
    them). A pre-release or local build at or past a built-in's ``fixed_in`` (below 0.22, where
    the allow-list still exists) is checked by the transform rather than assumed upstream.
    """
    recorded = recorded or {}
    verdicts: dict[str, Verdict] = {}
    steps: dict[str, list[Step]] = {}
    for p in catalogue.patches:
        if not p.covers(version):
            verdicts[p.name] = Verdict.OUTSIDE
            continue
        if p.is_upstream(version) and not (
            p.transforms and _unfinished(version) and Version(_base(version)) < LIST_GONE_FROM
        ):
            verdicts[p.name] = Verdict.UPSTREAM
            continue
        pin = p.pin(version)
        by_path = {c.path: c for c in p.applicable_transforms(record)}
        mine: list[tuple[str, PinnedFile | None, FileChange | None]]
        if pin is not None:
            mine = [(rel, pin.files[rel], by_path.get(rel)) for rel in sorted(pin.files)]
        elif by_path:
            mine = [(rel, None, c) for rel, c in by_path.items()]
        elif p.transforms:
            verdicts[p.name] = Verdict.NO_FILES
            continue
        else:
            verdicts[p.name] = Verdict.UNPORTED
            continue
        verdicts[p.name] = Verdict.APPLICABLE
        for rel, pinned, change in mine:
            if catalogue.is_selected(p.name) or p.name in recorded.get(rel, ()):
                steps.setdefault(rel, []).append(Step(p.name, rel, pinned, pin, change))
    return Layout(version, catalogue, verdicts, steps)


def builtin_paths(version: str) -> list[str]:
    """The files a built-in patch may touch on ``version``."""
    return load_catalogue().paths_for(version)


def pinned_reference(
    version: str, catalogue: Catalogue | None = None
) -> tuple[dict[str, str], str]:
    """The pristine hashes the pins of ``version`` start from (each file's first pin in the
    series), for installs without a RECORD to judge by; and the release they were pinned for."""
    catalogue = catalogue or load_catalogue()
    record: dict[str, str] = {}
    pinned_as = ""
    for p in catalogue.patches:
        pin = p.pin(version)
        if pin is None:
            continue
        pinned_as = pin.version
        for rel, pf in pin.files.items():
            record.setdefault(rel, pf.before)
    return record, pinned_as
