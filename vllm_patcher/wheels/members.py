"""A vLLM release wheel's members, each checked against the wheel's own RECORD before anything is
written, and the release a wheel holds (its METADATA)."""

from __future__ import annotations

import csv
import hashlib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from ..errors import FetchError
from ..install.record import RecordHash, parse_record

PROJECT = "vllm"


def version_of_filename(filename: str) -> str | None:
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


@dataclass
class FetchStats:
    """What one fetch cost: filled in as it goes, so a failure still shows what was spent."""

    requests: int = 0
    bytes: int = 0  # response bodies: index pages, ranges, or the whole wheel
    seconds: float = 0.0
    method: str = ""  # "range", "full", "local" (a wheel on disk or a file:// index)
    members: int = 0  # the asked-for members the wheel has, written (RECORD and METADATA aside)
    url: str = ""


@dataclass(frozen=True)
class WheelInfo:
    """A vLLM wheel's identity, from its own dist-info."""

    version: str
    dist_info: str  # "vllm-0.15.1.dist-info"
    record: bytes

    @property
    def record_digest(self) -> str:
        return hashlib.sha256(self.record).hexdigest()


def wheel_info(zf: zipfile.ZipFile, where: str) -> WheelInfo:
    """The dist-info of the vLLM wheel ``zf``; FetchError when it is not one."""
    metas = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(metas) != 1:
        raise FetchError(f"{where} is not a vLLM wheel (no single *.dist-info/METADATA in it)")
    dist_info = metas[0].split("/", 1)[0]
    try:
        meta = HeaderParser().parsestr(zf.read(metas[0]).decode("utf-8"))
        record = zf.read(f"{dist_info}/RECORD")
    except KeyError:
        raise FetchError(f"{where} has no {dist_info}/RECORD") from None
    except (UnicodeDecodeError, zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read the dist-info of {where}: {short_error(exc)}") from None
    name = (meta.get("Name") or "").strip().lower().replace("_", "-")
    version = (meta.get("Version") or "").strip()
    if name != PROJECT or not version:
        raise FetchError(
            f"{where} is not a vLLM wheel (its METADATA names {name or 'nothing'!r}, not 'vllm')"
        )
    return WheelInfo(version, dist_info, record)


def _parse_record(info: WheelInfo, where: str) -> dict[str, RecordHash]:
    try:
        rows = parse_record(info.record.decode("utf-8"))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FetchError(f"the RECORD of {where} is unreadable: {short_error(exc)}") from None
    return {r.as_posix(): r.hash for r in rows if r.hash is not None}


def extract_checked(
    zf: zipfile.ZipFile,
    version: str,
    members: Iterable[str],
    dest: Path,
    where: str,
    stats: FetchStats | None = None,
) -> WheelInfo:
    """Write the wheel's ``members`` (those it has) plus its METADATA and RECORD under ``dest``,
    each checked against the wheel's RECORD first; METADATA must say ``version``.

    Everything is read and checked before the first write, so a FetchError leaves ``dest`` empty.
    """
    from packaging.version import InvalidVersion, Version

    members = list(members)
    info = wheel_info(zf, where)
    try:
        same = Version(info.version) == Version(version)
    except InvalidVersion:
        same = info.version == version
    if not same:
        raise FetchError(f"{where} holds vLLM {info.version}, not {version} (its METADATA says so)")
    record = _parse_record(info, where)
    names = set(zf.namelist())
    wanted = sorted({m for m in members if m in names} | {f"{info.dist_info}/METADATA"})
    data: dict[str, bytes] = {f"{info.dist_info}/RECORD": info.record}
    for name in wanted:
        expected = record.get(name)
        if expected is None:
            raise FetchError(f"{where}: {name} has no sha256 in the wheel's RECORD")
        try:
            body = zf.read(name)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            raise FetchError(f"{where}: cannot read {name}: {short_error(exc)}") from None
        if not expected.matches(body):
            raise FetchError(
                f"{where}: {name} does not match the wheel's RECORD ({expected.mode} {expected.value} "
                "expected); nothing was written"
            )
        data[name] = body
    for name, body in data.items():
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    if stats is not None:  # the asked-for members the wheel has (not its RECORD and METADATA)
        stats.members = len([m for m in members if m in names])
    return info


def local_wheel(path: Path) -> WheelInfo:
    """The release a wheel on disk holds (``--wheel FILE``); FetchError for a bad file."""
    if not path.is_file():
        raise FetchError(f"--wheel {path}: no such file")
    try:
        with zipfile.ZipFile(path) as zf:
            info = wheel_info(zf, str(path))
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(
            f"--wheel {path} is not a wheel (not a zip file: {short_error(exc)})"
        ) from None
    from_name = version_of_filename(path.name) if path.name.startswith(("vllm-", "vllm_")) else None
    if from_name is not None and from_name != info.version:
        raise FetchError(
            f"--wheel {path}: the file name says vLLM {from_name} but its METADATA says "
            f"{info.version}"
        )
    return info


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
