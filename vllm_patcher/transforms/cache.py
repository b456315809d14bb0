"""Each codemod's output kept on disk, so that ``status``, ``apply`` and ``verify`` on a tree
the tool has seen before skip libcst (about 1 s a run on the DeepSeek/Kimi files).

An entry is keyed by everything the output depends on: the input text, the file's path, the
transform's name, the family description and release it is given, this folder's own source
bytes, libcst's version and the Python that runs it. Edit a codemod and every key changes. An
entry carries the hash of its text and is ignored when that does not match (a torn write, a
bad disk): then the codemod runs again. A codemod that raises is never cached. The cache is
only an accelerator: one that cannot be read or written is as if empty.
``VLLM_PATCHER_TRANSFORM_CACHE`` moves it and ``VLLM_PATCHER_NO_TRANSFORM_CACHE=1`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..fileops import cache_root
from . import Rewrite

_MAGIC = b"vllm-patcher-rewrite 1"


@functools.cache
def _code_digest() -> str:
    """This folder's sources, libcst's version and the Python version, hashed once a process."""
    from importlib import metadata

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    try:
        h.update(metadata.version("libcst").encode())
    except metadata.PackageNotFoundError:
        h.update(b"libcst ?")
    h.update(f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    return h.hexdigest()


def key(source: str, path: str, transform: str, extra: str) -> str:
    h = hashlib.sha256(_code_digest().encode())
    for part in (path, transform, extra, source):
        h.update(b"\0" + part.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def folder() -> Path | None:
    """Where entries live (``VLLM_PATCHER_TRANSFORM_CACHE``, else ``<cache>/transforms``), or
    None when the cache is off."""
    if os.environ.get("VLLM_PATCHER_NO_TRANSFORM_CACHE"):
        return None
    if os.environ.get("VLLM_PATCHER_TRANSFORM_CACHE"):
        return Path(os.environ["VLLM_PATCHER_TRANSFORM_CACHE"])
    return cache_root() / "transforms"


def _read(entry: Path) -> Rewrite | None:
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    header, _, body = data.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 4 or b" ".join(parts[:2]) != _MAGIC or parts[3] not in (b"0", b"1"):
        return None
    if hashlib.sha256(body).hexdigest().encode() != parts[2]:
        return None
    try:
        return Rewrite(body.decode("utf-8", "surrogatepass"), parts[3] == b"1")
    except UnicodeDecodeError:
        return None


def _write(entry: Path, result: Rewrite) -> None:
    body = result.source.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(body).hexdigest().encode()
    data = b" ".join((_MAGIC, digest, b"1" if result.changed else b"0")) + b"\n" + body
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # an accelerator: a cache that cannot be written is one that stays empty


def cached(
    run: Callable[[], Rewrite], source: str, path: str, transform: str, extra: str = ""
) -> Rewrite:
    """``run()``'s result for this input, from the cache when it holds it."""
    where = folder()
    if where is None:
        return run()
    name = key(source, path, transform, extra)
    entry = where / name[:2] / name
    hit = _read(entry)
    if hit is not None:
        return hit
    result = run()
    _write(entry, result)
    return result
