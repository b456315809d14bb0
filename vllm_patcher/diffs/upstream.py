"""Split a diff from upstream (``git diff``, a GitHub PR's ``.diff``) into one diff per file
under ``vllm/``, for ``import --diff``; refuse what a patch cannot be (new, deleted, renamed or
binary files)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import DiffShapeError
from ..fileops import is_package_path
from .text import file_text, parse_diff

if TYPE_CHECKING:
    from unidiff.patch import PatchedFile


def split_upstream_diff(diff_text: str) -> tuple[dict[str, str], list[str]]:
    """Split a multi-file diff (``git diff``, a GitHub PR's ``.diff``) into one diff per file.

    Returns ``({path: file diff}, dropped)``: paths under ``vllm/`` relative to site-packages
    (each diff has plain ``--- a/path`` / ``+++ b/path`` headers and the original hunks), and the
    paths outside ``vllm/`` (tests, docs, CI...), in diff order, which a patch cannot touch.

    Raises ``DiffShapeError`` when the diff does not parse, holds no file, or creates, deletes,
    renames, copies, changes the mode of or makes a binary change to a file under ``vllm/``.
    """
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for patched in parse_diff(diff_text, "the diff"):
        source, target = _rel(patched.source_file), _rel(patched.target_file)
        names = [name for name in (source, target) if name is not None]
        inside = [name for name in names if _in_vllm(name)]
        if not inside:
            shown = target or source or patched.path
            if shown not in dropped:
                dropped.append(shown)
            continue
        rel = inside[-1]
        problem = _shape_problem(patched, source, target)
        if problem:
            raise DiffShapeError(
                f"the diff {problem}; a patch may only edit existing text files under vllm/"
            )
        if not is_package_path(rel):
            raise DiffShapeError(
                f"the diff names {rel!r}, which is not a path inside vllm/ written plainly "
                "(vllm/dir/file.py: no '.', '..' or empty names, no backslashes)"
            )
        if rel in kept:
            raise DiffShapeError(f"the diff changes {rel} in two places; give each file once")
        kept[rel] = file_text(f"a/{rel}", f"b/{rel}", patched)
    return kept, dropped


def _rel(name: str | None) -> str | None:
    """A diff's file name as a path relative to site-packages; None for /dev/null."""
    from unidiff.constants import DEV_NULL, RE_PATCH_FILE_PREFIX

    if not name or name == DEV_NULL:
        return None
    if len(name) >= 2 and name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name[2:] if RE_PATCH_FILE_PREFIX.match(name) else name


def _in_vllm(rel: str) -> bool:
    return rel.split("/", 1)[0] == "vllm"


def _shape_problem(patched: PatchedFile, source: str | None, target: str | None) -> str | None:
    """What this file's diff does beyond editing an existing text file (a phrase), or None."""
    name = target or source
    if patched.is_binary_file:
        return f"changes the binary file {name}"
    if source is None:
        return f"creates {target}"
    if target is None:
        return f"deletes {source}"
    if source != target:
        return f"renames or copies {source} to {target}"
    if patched.source_mode != patched.target_mode:
        return f"changes the mode ({patched.source_mode} -> {patched.target_mode}) of {name}"
    if patched.is_symlink or patched.is_submodule:
        return f"changes the link or submodule {name}"
    if not len(patched):
        return f"has no text change for {name}"
    return None
