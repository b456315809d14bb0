"""RECORD and its hashes: the leaf every reader of an installer's RECORD uses."""

from __future__ import annotations

import base64
import csv
import hashlib

HASH_MODE = "sha256"  # the one hash RECORD rows are checked with


def file_hash(data: bytes) -> str:
    """sha256 the way RECORD spells it: urlsafe base64 without padding."""
    digest = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class RecordHash:
    __slots__ = ("mode", "value")

    def __init__(self, mode: str, value: str) -> None:
        self.mode, self.value = mode, value

    def matches(self, data: bytes) -> bool:
        """``data`` is the file this row hashes (a row in another mode never matches)."""
        return self.mode == HASH_MODE and self.value == file_hash(data)


class RecordRow:
    """One RECORD row, shaped like importlib.metadata's PackagePath for what we read of it."""

    __slots__ = ("_path", "hash")

    def __init__(self, path: str, file_hash: RecordHash | None) -> None:
        self._path, self.hash = path, file_hash

    def as_posix(self) -> str:
        return self._path


def parse_record(text: str) -> list[RecordRow]:
    """RECORD's rows (``path,mode=hash,size``); a row without a hash has ``hash`` None.

    csv.Error for a malformed row."""
    rows = []
    for row in csv.reader(text.splitlines()):
        if not row or not row[0]:
            continue
        mode, _, value = (row[1] if len(row) > 1 else "").partition("=")
        rows.append(RecordRow(row[0], RecordHash(mode, value) if value else None))
    return rows
