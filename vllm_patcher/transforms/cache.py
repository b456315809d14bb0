"""Each codemod's output kept on disk, so that ``status``, ``apply`` and ``verify`` on a tree
the tool has seen before skip libcst (about 1 s a run on the DeepSeek/Kimi files).

An entry is keyed by everything the output depends on: the input text, the file's path, the
transform's name, the family description and release a family codemod is given, the source
bytes of this folder and of the tool's modules it imports (``OUTSIDE``), libcst's version and the
Python that runs it. Edit a codemod and every key changes. An entry names its key and carries the
hash of its text, and is ignored when either does not match (a torn write, a bad disk, a file
copied under another name): then the codemod runs again. A codemod that raises is never cached. The cache is
only an accelerator: one that cannot be read or written is as if empty.
``VLLM_PATCHER_TRANSFORM_CACHE`` moves it; ``VLLM_PATCHER_NO_TRANSFORM_CACHE`` set to any
non-empty value turns it off. Someone who can write the cache can forge an entry, as with pip's
cache; verify's compile tier and the behaviour checks still read the bytes apply wrote.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..fileops import cache_root
from . import Rewrite

_MAGIC = b"vllm-patcher-rewrite 2"
# the tool's modules outside this folder that the codemods import, and so whose code can shape
# their output (tests/transforms/test_cache.py holds this to every module this folder reaches)
OUTSIDE = ("releases.py", "errors.py", "catalogue/family.py")


@functools.cache
def source_digest() -> str:
    """The codemods' sources (this folder and ``OUTSIDE``), hashed once a process: what the
    state record keeps as a codemod output's producer (``patching.survey.producer``)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for path in [*sorted(here.glob("*.py")), *(here.parent / rel for rel in OUTSIDE)]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _code_digest() -> str:
    """:func:`source_digest`, libcst's version and the Python version, hashed once a process."""
    from importlib import metadata

    h = hashlib.sha256(source_digest().encode())
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


def _header(name: str, body: bytes, changed: bool) -> bytes:
    """The entry's first line: its own key (a file copied under another key is no hit) and its
    text's hash (a torn or damaged one is none either)."""
    digest = hashlib.sha256(body).hexdigest()
    return b" ".join((_MAGIC, name.encode(), digest.encode(), b"1" if changed else b"0"))


def _read(entry: Path) -> Rewrite | None:
    try:  # non-blocking: a FIFO put where an entry would be must not hang the run
        fd = os.open(entry, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    header, _, body = data.partition(b"\n")
    for changed in (False, True):
        if header == _header(entry.name, body, changed):
            try:
                return Rewrite(body.decode("utf-8", "surrogatepass"), changed)
            except UnicodeDecodeError:
                return None
    return None


def _write(entry: Path, result: Rewrite) -> None:
    body = result.source.encode("utf-8", "surrogatepass")
    data = _header(entry.name, body, result.changed) + b"\n" + body
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry.parent)
        try:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the entry from a shared cache's group
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
