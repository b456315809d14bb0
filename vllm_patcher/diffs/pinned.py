"""Pinned diffs: make, split, apply exactly, and write ``NAME/vllm-<version>/``.

A release folder of a patch holds ``patch.diff`` (paths relative to site-packages, ``a/`` and
``b/`` prefixes so ``git apply`` and ``patch -p1`` take it too) and ``manifest.json`` with every
touched file's sha256 before (the bytes the patches before it in the series leave; pristine for
the first) and after. Applying checks every hunk's context at its stated line, with no fuzz and no
offsets, and then the caller checks the result against the manifest.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PatchFolderError, StateError
from ..fileops import package_path_problem


def _check_rel(rel: str, where: Path | str) -> None:
    problem = package_path_problem(rel)
    if problem:
        raise PatchFolderError(f"{where} names {problem}; refusing to use it")


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
        raise PatchFolderError(f"diff {where} does not parse: {exc}") from None
    out = {}
    for patched in patch_set:
        rel = _strip_prefix(patched.target_file)
        _check_rel(rel, where)
        if _strip_prefix(patched.source_file) != rel:
            raise PatchFolderError(f"diff {where} renames {patched.source_file}; refusing it")
        if rel in out:
            raise PatchFolderError(f"diff {where} changes {rel} twice; one section per file")
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
