"""Version-pinned diffs under ``patches/vllm-<version>/``: generate, load, and apply exactly.

Each release folder holds one unified diff per patch (paths relative to site-packages, ``a/`` and
``b/`` prefixes so ``git apply`` takes them too) and ``manifest.json`` with every touched file's
sha256 before (equal to the wheel's RECORD) and after. Applying checks every hunk's context at its
stated line, with no fuzz and no offsets, and then checks the result against the manifest.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import StateError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class PinnedFile:
    path: str
    patch: str
    before: str
    after: str


@dataclass(frozen=True)
class PinnedRelease:
    version: str
    folder: Path
    files: dict[str, PinnedFile]

    def diff_text(self, patch: str) -> str:
        return (self.folder / f"{patch}.diff").read_text(encoding="utf-8")


def patches_root() -> Path:
    """The shipped ``patches/`` folder (installed as the ``vllm_patcher.patches`` package).

    ``VLLM_PATCHER_PATCHES_DIR`` points elsewhere (an empty folder hides every pinned diff).
    """
    override = os.environ.get("VLLM_PATCHER_PATCHES_DIR")
    if override:
        return Path(override)
    from importlib import resources

    try:
        return Path(str(resources.files("vllm_patcher.patches")))
    except ModuleNotFoundError:  # running from a source tree that was never installed
        return Path(__file__).resolve().parent.parent / "patches"


def pinned_versions(root: Path | None = None) -> list[str]:
    root = root or patches_root()
    return sorted(
        (p.name.removeprefix("vllm-") for p in root.glob("vllm-*") if (p / MANIFEST).is_file()),
        key=_version_key,
    )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in version.split("."))


def _release_folder(version: str, root: Path) -> Path | None:
    """The folder pinned for ``version``; a local build (``0.15.1+cpu``) falls back to ``0.15.1``.

    Safe because a pinned diff is only used when every file matches the manifest's hashes.
    """
    candidates = [version]
    public = version.split("+", 1)[0]
    if public != version:
        candidates.append(public)
    for candidate in candidates:
        folder = root / f"vllm-{candidate}"
        if (folder / MANIFEST).is_file():
            return folder
    return None


def load(version: str, root: Path | None = None) -> PinnedRelease | None:
    """The pinned release for ``version`` (a manifest is read once per process)."""
    return _load(version, root or patches_root())


@functools.cache
def _load(version: str, root: Path) -> PinnedRelease | None:
    folder = _release_folder(version, root)
    if folder is None:
        return None
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = {
            rel: PinnedFile(rel, str(v["patch"]), str(v["before"]), str(v["after"]))
            for rel, v in data["files"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateError(
            f"pinned manifest {path} is unreadable ({exc}); reinstall vllm-patcher"
        ) from None
    for rel in files:
        _check_rel(rel, path)
    return PinnedRelease(version=version, folder=folder, files=files)


def _check_rel(rel: str, where: Path | str) -> None:
    from .fileops import is_package_path

    if not is_package_path(rel):
        raise StateError(f"{where} names a path outside vllm/ ({rel}); refusing to use it")


def make_diff(rel: str, before: str, after: str) -> str:
    import difflib

    if not before.endswith("\n") or not after.endswith("\n"):
        raise StateError(f"{rel} does not end with a newline; cannot pin it")
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{rel}",
        tofile=f"b/{rel}",
        n=3,
    )
    return "".join(lines)


def split_by_file(diff_text: str, where: str) -> dict[str, str]:
    """Map each target path in a multi-file diff to its own diff text (validated paths)."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        patch_set = PatchSet(diff_text)
    except UnidiffParseError as exc:
        raise StateError(f"pinned diff {where} does not parse: {exc}") from None
    out = {}
    for patched in patch_set:
        rel = _strip_prefix(patched.target_file)
        _check_rel(rel, where)
        if _strip_prefix(patched.source_file) != rel:
            raise StateError(f"pinned diff {where} renames {patched.source_file}; refusing it")
        out[rel] = str(patched)
    return out


def _strip_prefix(name: str) -> str:
    return name[2:] if name.startswith(("a/", "b/")) else name


def apply_exact(source: str, file_diff: str, where: str, reverse: bool = False) -> str:
    """Apply one file's diff to ``source``; any context mismatch is an error, never a fuzzy match.

    With ``reverse`` the diff is taken back out (``git apply -R``): ``source`` is the patched text.
    """
    from unidiff.patch import PatchSet

    (patched,) = PatchSet(file_diff)
    src = source.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # next unread line of src, 0-based
    for hunk in patched:
        start_no, length = (
            (hunk.target_start, hunk.target_length)
            if reverse
            else (hunk.source_start, hunk.source_length)
        )
        start = start_no - 1 if length else start_no
        if start < pos:
            raise StateError(f"pinned diff {where}: overlapping hunks")
        out.extend(src[pos:start])
        pos = start
        for line in hunk:
            kept = line.is_added if reverse else line.is_removed
            made = line.is_removed if reverse else line.is_added
            if line.is_context or kept:
                if pos >= len(src) or src[pos] != line.value:
                    raise StateError(
                        f"pinned diff {where} does not match the file at line {pos + 1}; "
                        "the file is not the "
                        + ("pinned result" if reverse else "pristine release")
                    )
                if line.is_context:
                    out.append(src[pos])
                pos += 1
            elif made:
                out.append(line.value)
    out.extend(src[pos:])
    return "".join(out)


def write_release(
    folder: Path, version: str, files: list[tuple[str, str, str, str, str, str]]
) -> bool:
    """Write one release folder; ``files`` = (rel, patch, before_hash, after_hash, before, after).

    Returns True when anything on disk changed (re-pinning an unchanged tree rewrites nothing).
    """
    diffs: dict[str, list[str]] = {}
    manifest: dict[str, object] = {"vllm_version": version, "files": {}}
    entries: dict[str, dict[str, str]] = {}
    for rel, patch, before_hash, after_hash, before, after in files:
        diffs.setdefault(patch, []).append(make_diff(rel, before, after))
        entries[rel] = {"patch": patch, "before": before_hash, "after": after_hash}
    manifest["files"] = dict(sorted(entries.items()))
    wanted = {f"{patch}.diff": "".join(parts) for patch, parts in sorted(diffs.items())}
    wanted[MANIFEST] = json.dumps(manifest, indent=2) + "\n"
    changed = False
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in wanted.items():
        path = folder / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.write_text(text, encoding="utf-8")
        changed = True
    for stale in folder.glob("*.diff"):
        if stale.name not in wanted:
            stale.unlink()
            changed = True
    return changed
