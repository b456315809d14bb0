"""The patches as data: a ``Patch`` (its releases, pins and codemods), a ``Pin`` (one release's
diff and manifest), and the ``Catalogue`` of them in series order.

These are on the start-up path of every status, apply and revert, so they are named tuples and
plain classes: defining a dataclass costs about as much as reading every patch folder (it
compiles its methods at import), see docs/benchmarks.md."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.specifiers import Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import BadSetting, PatchFolderError
from ..fileops import is_package_path, package_path_problem
from ..releases import base_version, has_allow_list, public_version, release_of

PATCH_TOML = "patch.toml"


DIFF = "patch.diff"


MANIFEST = "manifest.json"


SERIES = "series"
# NAME/conflicts/vllm-VERSION/: a port's or import's merged files waiting to be resolved
CONFLICTS = "conflicts"


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


class Releases:
    """``releases`` of a patch.toml: one PEP 440 specifier, or a list of them (PEP 440 has no
    "or"): a release is covered when any one of them matches it."""

    __slots__ = ("sets",)

    def __init__(self, sets: tuple[SpecifierSet, ...]) -> None:
        self.sets = sets

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Releases) and self.sets == other.sets

    def __hash__(self) -> int:
        return hash(self.sets)

    def __repr__(self) -> str:
        return f"Releases({self.sets!r})"

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
        bounds.add(release_of(v))
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


if TYPE_CHECKING:
    from .family import Family


ALLOW_LIST_CODEMOD = "allow_list:rewrite"  # a family's allow-list entry (folders.family_changes)


class FileChange(NamedTuple):
    """One file a patch rewrites, and the codemod that rewrites it (by name: the data only;
    ``transforms.codemod`` runs it)."""

    path: str
    transform: str  # "module:function" under vllm_patcher.transforms, as patch.toml names it
    needs: str | None = None  # only applicable when the release ships this file
    family: Family | None = None  # a family codemod's description (its patch.toml's [family])

    def applies_to(self, record: dict[str, str], version: str | None = None) -> bool:
        """The release ships the file (and what it needs); a family's allow-list entry only
        where ``version`` still has the allow-list (through 0.21.x)."""
        if self.family is not None and self.transform == ALLOW_LIST_CODEMOD and version:
            try:
                if not has_allow_list(version):
                    return False
            except InvalidVersion:
                pass  # the caller refuses an unreadable release with its own words
        return self.path in record and (self.needs is None or self.needs in record)


class PinnedFile(NamedTuple):
    """One file of a pinned diff: its hash before (the bytes the earlier patches leave) and after."""

    path: str
    before: str
    after: str


class Pin:
    """One patch's pinned diff for one release."""

    def __init__(self, patch: str, version: str, folder: Path, files: dict[str, PinnedFile]):
        self.patch = patch
        self.version = version
        self.folder = folder
        self.files = files

    def __repr__(self) -> str:
        return f"Pin({self.patch!r}, {self.version!r}, {str(self.folder)!r})"

    @property
    def where(self) -> str:
        return f"{self.patch}/{self.folder.name}/{DIFF}"

    @functools.cached_property
    def per_file(self) -> dict[str, str]:
        """Each touched file's own diff text; the diff must name exactly the manifest's files."""
        from ..diffs.pinned import split_by_file

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


class Patch(NamedTuple):
    """One patch folder, loaded."""

    name: str
    summary: str
    releases: Releases
    fixed_in: Version | None
    folder: Path
    origin: str  # "built-in", or the folder it was given in
    transforms: tuple[FileChange, ...] = ()
    pinned_versions: tuple[str, ...] = ()
    family: Family | None = None  # a family backport's description (catalogue/family.py)

    @property
    def builtin(self) -> bool:
        return self.origin == BUILTIN

    def args(self, rest: str) -> str:
        """Arguments that reach this patch again: ``--patches ORIGIN`` for a patch of your own
        (quoted for the shell, so a pasted hint works with spaces in the path)."""
        if self.builtin:
            return rest
        from shlex import quote  # hints only

        return f"--patches {quote(self.origin)} {rest}"

    def port_hint(self, version: str) -> str:
        """The command that gives this patch a diff for ``version``'s release: ``--continue``
        when a port's conflicts for it are waiting (a fresh port would be refused)."""
        release = base_version(version)
        rest = f"port {self.name} --to {release}"
        if (self.folder / CONFLICTS / f"vllm-{release}").is_dir():
            rest += " --continue"
        return f"vllm-patcher {self.args(rest)}"

    def unported_fix(self, version: str) -> str:
        """What to do about ``version`` when this patch has no diff for it: run the port that
        makes one; but a pre-release or dev build of the release that made this patch upstream
        has no files on the index to port from, and its final release needs no patch."""
        release = base_version(version)
        if self.fixed_in is not None and Version(release) >= self.fixed_in:
            return (
                f"install vLLM {release} or later, which has {self.name} upstream "
                f"({version} is a build before {release}, with no release files to port to)"
            )
        return f"run `{self.port_hint(version)}`"

    def covers(self, version: str) -> bool:
        return self.releases.contains(base_version(version))

    def is_upstream(self, version: str) -> bool:
        return self.fixed_in is not None and release_of(version) >= self.fixed_in

    def pin(self, version: str) -> Pin | None:
        """The pinned diff for ``version``; a local build (``0.15.1+cpu``) falls back to 0.15.1."""
        public = public_version(version)
        for candidate in dict.fromkeys((version, public)):
            if candidate in self.pinned_versions:
                return load_pin(self.name, candidate, self.folder / f"vllm-{candidate}")
        return None

    def check_files(self) -> list[Path]:
        return sorted((self.folder / "checks").glob("*.py"))

    def applicable_transforms(
        self, record: dict[str, str], version: str | None = None
    ) -> tuple[FileChange, ...]:
        return tuple(c for c in self.transforms if c.applies_to(record, version))

    def files_for(self, version: str, record: dict[str, str]) -> list[str]:
        """The files this patch touches on ``version`` (pinned, else its transforms')."""
        pin = self.pin(version)
        if pin is not None:
            return sorted(pin.files)
        return [c.path for c in self.applicable_transforms(record, version)]

    def all_paths(self) -> list[str]:
        paths = {c.path for c in self.transforms}
        for version in self.pinned_versions:
            pin = self.pin(version)
            if pin is not None:
                paths.update(pin.files)
        return sorted(paths)


class Catalogue(NamedTuple):
    """Every patch this run knows, in series order, and which of them are selected."""

    patches: tuple[Patch, ...]
    selected: frozenset[str] = frozenset()

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

    def builtins(self) -> Catalogue:
        """The built-in patches alone, none singled out: what an install is judged by
        (``install.reference``), whatever folders of the user's this run has."""
        return Catalogue(tuple(p for p in self.patches if p.builtin))

    def unselected(self) -> Catalogue:
        """The same patches with none singled out: the view status gives of every patch."""
        return Catalogue(self.patches)

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


def version_key(version: str) -> tuple[Any, ...]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


@functools.cache
def load_pin(patch: str, version: str, folder: Path) -> Pin:
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
