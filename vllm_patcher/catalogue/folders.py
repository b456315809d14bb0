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
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import PatchFolderError
from .family import ALLOW_LIST_FILE, Family, read_family
from .model import (
    ALLOW_LIST_CODEMOD,
    BUILTIN,
    MANIFEST,
    NAME_RULE,
    PATCH_TOML,
    SERIES,
    Catalogue,
    FileChange,
    Patch,
    Releases,
    admits_a_release,
    valid_patch_name,
    version_key,
)


def builtin_root() -> Path:
    """The shipped patches folder (the ``vllm_patcher.patches`` package).

    ``VLLM_PATCHER_PATCHES_DIR`` replaces it (tests point it at a copy or an empty folder).
    """
    override = os.environ.get("VLLM_PATCHER_PATCHES_DIR")
    if override:
        return Path(override)
    here = Path(__file__).resolve().parent.parent  # vllm_patcher/
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
    tool = read_toml(project).get("tool", {})
    table = tool.get("vllm-patcher", {}) if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise PatchFolderError(f"{project}: [tool.vllm-patcher] must be a table")
    folders = table.get("patches", [])
    select = table.get("select", [])
    if not _str_list(folders) or not _str_list(select):
        raise PatchFolderError(
            f"{project}: [tool.vllm-patcher] patches and select must be lists of strings"
        )
    return [project.parent / f for f in folders], list(select)


def patches_args(folders: Iterable[Path | str]) -> str:
    """The ``--patches`` options that give these folders again, in their order, quoted for the
    shell (for hints a user pastes)."""
    from shlex import quote  # hints only

    return " ".join(f"--patches {quote(str(f))}" for f in folders)


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def load_catalogue(
    folders: Iterable[Path] = (), select: Iterable[str] = (), builtins: Catalogue | None = None
) -> Catalogue:
    """The built-ins plus every patch in ``folders``; a clash or a malformed folder is refused.
    ``builtins``: the built-ins this run loaded already (``Catalogue.builtins``), not read again."""
    if builtins is None:
        patches = list(_load_folder(builtin_root(), BUILTIN))
    else:
        patches = list(builtins.builtins().patches)
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


def read_toml(path: Path) -> dict[str, Any]:
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
    data = read_toml(where)
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
    unknown = set(data) - {"name", "summary", "releases", "fixed_in", "transform", "family"}
    if unknown:
        raise PatchFolderError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    transforms = _transforms(data.get("transform", []), where, origin)
    family = None
    if "family" in data:
        if origin != BUILTIN:
            raise PatchFolderError(
                f"{where}: [family] drives a codemod inside vllm-patcher and is only for "
                "built-in patches; a patch of your own is its pinned diffs"
            )
        family = read_family(data["family"], str(where))
        transforms += family_changes(family)
    versions = tuple(
        sorted(
            (
                p.name.removeprefix("vllm-")
                for p in folder.glob("vllm-*")
                if (p / MANIFEST).is_file()
            ),
            key=version_key,
        )
    )
    return Patch(name, summary, spec, fixed, folder, origin, transforms, versions, family)


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


def family_changes(family: Family) -> tuple[FileChange, ...]:
    """A family's files and codemods: the allow-list, then each model file."""
    allow = [FileChange(ALLOW_LIST_FILE, ALLOW_LIST_CODEMOD, family=family)]
    models = [m for m in family.models if m.rewrite]
    return (
        *(allow if family.allow_list else []),
        *(
            FileChange(file, "eagle3_family:rewrite", family=family)
            for file in dict.fromkeys(m.file for m in models)  # one file, several releases
        ),
    )


def _refuse_links(folder: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in (*dirnames, *filenames):
            if os.path.islink(os.path.join(dirpath, n)):
                raise PatchFolderError(
                    f"{os.path.join(dirpath, n)} is a symbolic link; a patch folder must hold "
                    "plain files (copy the target in instead)"
                )
