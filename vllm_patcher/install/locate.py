"""Find the vLLM install to work on: its version, where its real files are, and what judges them.

Three ways to point at it: by default the interpreter running the tool when it has vLLM, else
the active ``VIRTUAL_ENV``'s when that venv has vLLM; another environment's interpreter or venv
directory (``--python``, asked without importing vLLM); or a directory (``--target``, e.g. a
site-packages inside a container image build).

Install shapes, and the reference each one's files are judged against:

- ``wheel``: the ``vllm/`` package sits beside its ``vllm-*.dist-info``, whose RECORD hashes
  every file. The shape is read from the files, never from the option that named them: a
  site-packages given as ``--target`` is the same wheel install as the venv's ``--python`` finds.
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
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ..errors import TargetNotFound
from ..intarget import scripts
from ..intarget.scripts.where_vllm import gather
from .dist import DistFolder, dist_key, find_distribution
from .record import RecordRow
from .reference import by_pin, by_record
from .target import (
    CHOSEN_HERE,
    CHOSEN_PYTHON,
    CHOSEN_TARGET,
    CHOSEN_VENV,
    DIST_KEYS,
    DIST_NAMES,
    EDITABLE,
    SOURCE,
    WHEEL,
    Target,
)

if TYPE_CHECKING:
    from ..catalogue.model import Catalogue


def _refuse_two_dist_infos(directory: Path) -> None:
    """An interrupted upgrade leaves two vllm dist-infos side by side: never guess which is true."""
    try:
        found = sorted(
            p.name
            for p in directory.iterdir()
            if p.name.endswith(".dist-info") and dist_key(p.name) in DIST_KEYS and p.is_dir()
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


def _direct_url(dist: DistFolder) -> dict[str, Any]:
    try:
        text = dist.read_text("direct_url.json")
        data = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_editable(direct_url: dict[str, Any]) -> bool:
    dir_info = direct_url.get("dir_info")
    return isinstance(dir_info, dict) and dir_info.get("editable") is True


def _home(dist: DistFolder) -> Path:
    return Path(str(dist.locate_file(""))).resolve()


def _package(directory: Path) -> Path | None:
    """``directory/vllm`` when it is a real (non-namespace) package."""
    candidate = directory / "vllm"
    return candidate if (candidate / "__init__.py").is_file() else None


def _editable_package_dir(
    dist: DistFolder, files: list[RecordRow], direct_url: dict[str, Any]
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


def _resolve(
    dist: DistFolder, package: Path | None, python: Path | None, catalogue: Catalogue
) -> Target:
    """Pick the shape of one distribution and the reference its real files are judged against.

    ``package`` is where the interpreter imports ``vllm`` from (None when there is no interpreter
    to ask, or it could not find it); ``catalogue`` is the command's (``reference`` reads its
    built-ins).
    """
    dist_dir = dist.path
    home = _home(dist)
    _refuse_two_dist_infos(dist_dir.parent)
    direct_url = _direct_url(dist)
    editable = _is_editable(direct_url)
    egg = dist_dir.name.endswith(".egg-info")
    meta = dist.metadata()  # parsed once: vLLM's METADATA and RECORD are large
    name, version = str(meta.get("name")), str(meta.get("version"))
    files = dist.record_rows()
    lists_package = any(f.as_posix().startswith("vllm/") for f in files or [])

    if editable:
        if package is None:
            package = _editable_package_dir(dist, files or [], direct_url)
        if package is None:
            raise TargetNotFound(
                f"vLLM {version} is an editable install ({dist_dir}) but its source tree was not "
                "found (moved or deleted?); reinstall it with pip install -e SOURCE_TREE"
            )
        return by_pin(
            package.resolve(), version, name, python, EDITABLE, "an editable install", catalogue
        )
    if egg:
        package = package or _package(home)
        if package is None:
            raise TargetNotFound(f"vLLM {version} ({dist_dir}) has no vllm/ package beside it")
        return by_pin(
            package.resolve(), version, name, python, SOURCE, "a source install", catalogue
        )
    if package is not None and package.resolve().parent != home:
        if lists_package:
            raise TargetNotFound(
                f"{python or 'this interpreter'} imports vLLM from {package}, not from the files "
                f"of the installed distribution {dist_dir}; remove one of the two"
            )
        return by_pin(
            package.resolve(), version, name, python, SOURCE, "a source install", catalogue
        )
    return by_record(version, name, files, home, python, WHEEL, catalogue)


def _locate(info: dict[str, Any], python: Path | None, who: str, catalogue: Catalogue) -> Target:
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
        return by_pin(
            package.resolve(), version, "vllm", python, SOURCE, "a source tree", catalogue
        )
    dist = DistFolder(Path(dists[0]["path"]))
    return _resolve(dist, package, python, catalogue)


def _gather_here() -> dict[str, Any]:
    result: dict[str, Any] = gather(list(DIST_NAMES))
    return result


def _has_vllm(info: dict[str, Any]) -> bool:
    return bool(info.get("dists") or info.get("package_dir"))


def locate_current(catalogue: Catalogue) -> Target:
    return _locate(_gather_here(), Path(sys.executable), sys.executable, catalogue)


def interpreter(python: str) -> str:
    """``--python`` takes an interpreter or a venv directory (its ``bin/python``)."""
    if not python.strip():
        raise TargetNotFound("--python got an empty path; give a venv directory or its interpreter")
    path = Path(python)
    if not path.is_dir():
        return python
    exe = path / "bin" / "python"
    if not exe.exists():
        site = find_distribution(python, DIST_NAMES) is not None
        raise TargetNotFound(
            f"{python} is a directory without bin/python; --python wants a venv directory "
            "or its interpreter"
            + (" (it holds vLLM's files: --target takes a site-packages directory)" if site else "")
        )
    return str(exe)


def _query(python: str) -> dict[str, Any]:
    """Ask another interpreter where its vLLM is (without importing vLLM)."""
    exe = Path(python)
    if not exe.exists():
        raise TargetNotFound(f"interpreter {python} does not exist; pass the venv's bin/python")
    if not os.access(exe, os.X_OK) or exe.is_dir():
        raise TargetNotFound(f"{python} is not an executable interpreter")
    # runtime imports subprocess: only --python and VIRTUAL_ENV ask another interpreter
    from ..runtime import ScriptNotRun, run_script

    try:
        proc = run_script(exe, [str(scripts.path("where_vllm")), *DIST_NAMES], timeout=60)
    except ScriptNotRun as exc:
        if exc.timed_out:
            raise TargetNotFound(
                f"{python} did not answer within 60 s; pass the venv's bin/python"
            ) from None
        raise TargetNotFound(f"cannot run {python}: {exc.strerror}") from None
    if proc.returncode != 0:
        last = proc.stderr_tail()
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", last) and len(last) < 300:
            raise TargetNotFound(f"{python} could not be queried: {last}")
        raise TargetNotFound(
            f"{python} did not answer like a Python interpreter (exit {proc.returncode}); "
            "pass the venv's bin/python"
        )
    if proc.answer is None:
        raise TargetNotFound(f"{python} did not answer like a Python interpreter")
    return proc.answer


def locate_with_python(python: str, catalogue: Catalogue) -> Target:
    python = interpreter(python)
    return _locate(_query(python), Path(python), python, catalogue)


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


def locate_default(catalogue: Catalogue) -> Target:
    """No --python, no --target: this interpreter when it has vLLM (the tool runs inside the
    vLLM venv), else the active ``VIRTUAL_ENV`` when that venv has vLLM."""
    here = _gather_here()
    if _has_vllm(here):
        return _locate(here, Path(sys.executable), sys.executable, catalogue)
    venv_python = _active_venv_python()
    if venv_python is not None:
        info = _query(venv_python)
        if _has_vllm(info):
            return _locate(info, Path(venv_python), venv_python, catalogue)
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


def hub_python(python: str | None, directory: str | None, installed: Callable[[], Target]) -> str:
    """The interpreter whose huggingface_hub looks repo ids up in the local cache (doctor,
    serve-args): --python's, else the vLLM install's (``installed``: the one ``vllm serve`` runs
    in; the run's own locate, so it is asked once), else this one. Called only when an argument
    is a repo id."""
    if python is not None:
        return interpreter(python)
    if directory is None:
        try:
            found = installed().python
        except TargetNotFound:
            found = None
        if found is not None:
            return str(found)
    return sys.executable


def locate_in_directory(directory: str, catalogue: Catalogue) -> Target:
    if not directory.strip():
        raise TargetNotFound("--target got an empty path; give the site-packages directory")
    root = Path(directory)
    if not root.is_dir():
        raise TargetNotFound(f"--target {directory} is not a directory")
    _refuse_two_dist_infos(root)
    dist = find_distribution(str(root), DIST_NAMES)
    if dist is None:
        raise TargetNotFound(
            f"no vllm-*.dist-info in {directory}; --target wants the site-packages directory"
        )
    return _resolve(dist, None, None, catalogue)


def locate(python: str | None, directory: str | None, catalogue: Catalogue) -> Target:
    """The install to work on, with why it was chosen (``chosen_by``); ``catalogue`` is the
    command's, whose built-ins judge the install's files (``reference``)."""
    if python is not None:
        target, why = locate_with_python(python, catalogue), CHOSEN_PYTHON
    elif directory is not None:
        target, why = locate_in_directory(directory, catalogue), CHOSEN_TARGET
    else:
        target = locate_default(catalogue)
        why = CHOSEN_HERE if target.python == Path(sys.executable) else CHOSEN_VENV
    return target._replace(chosen_by=why)


class Located:
    """The installs one run located, by (``--python``, ``--target``): each is asked once, however
    many times the run needs it (doctor's release, then the interpreter that finds repo ids), as
    virtualenv's ``cached_py_info`` keeps one answer per interpreter. Held by the run's options,
    never by the process: the next run locates afresh. A refusal is not kept."""

    def __init__(self) -> None:
        self._found: dict[tuple[str | None, str | None], Target] = {}

    def locate(self, python: str | None, directory: str | None, catalogue: Catalogue) -> Target:
        key = (python, directory)
        if key not in self._found:
            self._found[key] = locate(python, directory, catalogue)
        return self._found[key]
