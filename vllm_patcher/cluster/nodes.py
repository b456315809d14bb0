"""cluster: status, apply or verify on every node of a running Ray cluster, and one verdict.

A model served across nodes loads each node's own vLLM, so one unpatched or differently patched
node is enough to fail at load or to compute differently. Ray reaches the nodes: vLLM's multi-node
backend already needs it. The tool's own process never imports Ray. ``scripts/ray_driver.py`` runs in
the target interpreter (``--python``, else this one), connects with ``ray.init(address=...)``,
pins one task to each alive node (hard node affinity) and prints every node's answer as one JSON
line. Each task calls ``run_on_node`` from this module, shipped to the cluster with Ray's
runtime_env ``py_modules`` so that every node runs the same tool code and nothing is installed
per node; a node that cannot set the shipped copy up falls back to an installed vllm_patcher.

On a node, the vLLM inspected is the one the worker's interpreter has installed, or the
site-packages named by ``VLLM_PATCHER_SITE`` in the worker's environment (like ``--target``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalogue.folders import builtin_root, load_catalogue
from ..errors import ClusterError, FileSystemError, PatcherError, TargetNotFound
from ..fileops import os_error_message
from ..install import locate as locate_mod
from ..intarget import scripts
from ..runtime import ScriptNotRun, run_script

if TYPE_CHECKING:
    from ..catalogue.model import Catalogue
    from ..install.target import Target

# the vllm_patcher package (shipped whole to the nodes)
PACKAGE = Path(__file__).resolve().parent.parent
SITE_ENV = "VLLM_PATCHER_SITE"
COMMANDS = ("status", "apply", "verify")
DEFAULT_TIMEOUT = 600.0
OK_STATES = ("applied", "upstream", "not-applicable")

# Node outcomes: the task answered; our code refused on the node (a PatcherError there, or the
# tool could not run there); the node died or did not answer in time.
ANSWERED, FAILED, LOST = "answered", "failed", "lost"


@dataclass
class NodeResult:
    """What one node reported (or why it could not)."""

    node_id: str
    host: str
    ip: str
    outcome: str  # answered | failed | lost
    code: str = ""  # shipped | installed: where the tool code the task ran came from
    tool: str | None = None  # the vllm_patcher folder the task imported on the node
    vllm_version: str | None = None
    location: str | None = None
    fingerprint: str | None = None
    patches: dict[str, str] = field(default_factory=dict)  # patch -> state
    details: dict[str, str] = field(default_factory=dict)  # patch -> why it is not applied
    error: str = ""
    error_exit_code: int | None = None
    changed: list[str] | None = None  # apply: files written on this node
    notes: list[str] = field(default_factory=list)
    verify_ok: bool | None = None
    verify_tiers: dict[str, str] = field(default_factory=dict)
    verify_failures: list[str] = field(default_factory=list)
    seconds: float | None = None  # the work itself on the node
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """Host plus short node id: several nodes may share a host (or a container name)."""
        return f"{self.host}/{self.node_id[:8]}"


@dataclass
class ClusterReport:
    command: str
    address: str
    ray_version: str
    nodes: list[NodeResult]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def fingerprints(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for node in self.nodes:
            if node.fingerprint:
                groups.setdefault(node.fingerprint, []).append(node.node_id)
        return groups

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "command": self.command,
            "address": self.address,
            "ray_version": self.ray_version,
            "ok": self.ok,
            "fingerprints": self.fingerprints,
            "problems": self.problems,
            "notes": self.notes,
            "nodes": [{"label": n.label, **asdict(n)} for n in self.nodes],
            "timings": self.timings,
        }


# --- on each node (inside a Ray worker) ---------------------------------------------------------


def run_on_node(command: str, strict: bool = False) -> dict[str, Any]:
    """Run one command on this node's vLLM and return plain data; called by the driver's task.

    The node's run is a command of its own: it loads the catalogue once (the built-ins for
    locate, then the user folders the driver shipped) and hands it down."""
    # the node side's patching: the driver machine, which imports this module too, never runs it
    from ..patching import status as status_mod

    started = time.perf_counter()
    site = os.environ.get(SITE_ENV) or None
    answer: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": sys.executable,
        "site_env": site,
        "tool": str(PACKAGE),
    }
    target: Target | None = None
    catalogue: Catalogue | None = None
    try:
        builtins = load_catalogue()
        if site:
            target = locate_mod.locate_in_directory(site, builtins)
        else:
            target = locate_mod.locate_current(builtins)
        catalogue = load_catalogue(_shipped_user_folders(), builtins=builtins)
        if command == "apply":
            from ..patching import txn

            result = txn.apply(target, catalogue, strict=strict)
            answer["apply"] = {
                "changed": result.changed,
                "notes": result.notes,
                "recovered": result.recovered,
            }
        elif command == "verify":
            from ..patching.verify import verify

            answer["verify"] = verify(target, catalogue).to_dict()
        answer["status"] = status_mod.read_status(target, catalogue).to_dict()
    except PatcherError as exc:
        answer["error"] = {"message": exc.message, "exit_code": exc.exit_code}
        if target is not None and catalogue is not None and "status" not in answer:
            # all or nothing on the node: show what it is left in
            with contextlib.suppress(PatcherError):
                answer["status"] = status_mod.read_status(target, catalogue).to_dict()
    except OSError as exc:
        answer["error"] = {
            "message": os_error_message(None, exc),
            "exit_code": FileSystemError.exit_code,
        }
    except ModuleNotFoundError as exc:
        if exc.name != "libcst":
            raise
        answer["error"] = {
            "message": "no pinned diff matches here, and the libcst transform fallback needs "
            "libcst, which this node does not have (pip install libcst there)",
            "exit_code": None,
        }
    answer["seconds"] = round(time.perf_counter() - started, 4)
    return answer


# --- on the machine running the tool ------------------------------------------------------------


USER_PATCHES = "user_patches"


def _shipped_user_folders() -> list[Path]:
    """On a node: the user patch folders the driver machine shipped with the tool, in order."""
    base = PACKAGE / USER_PATCHES
    listing = base / "folders"
    if not listing.is_file():
        return []
    return [base / n for n in listing.read_text().split() if n]


def stage_tool(dest: Path, user_dirs: list[Path] | None = None) -> list[Path]:
    """Copy this tool's code (with its pinned diffs) and unidiff into ``dest`` for py_modules.

    Only sources and pins are copied, so the package Ray uploads hashes the same on every run and
    the nodes reuse what they already unpacked. libcst is not shipped (a compiled extension): the
    status path and apply through pinned diffs do not need it, only the transform fallback does.
    """
    package = PACKAGE
    staged = dest / "vllm_patcher"
    shutil.copytree(
        package,
        staged,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "patches", USER_PATCHES),
    )
    user_dirs = user_dirs or []
    # The built-ins, then the user's folders in their order: the nodes load the same catalogue.
    shutil.copytree(
        builtin_root(), staged / "patches", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    (staged / "patches" / "__init__.py").touch()
    names = []
    for i, folder in enumerate(user_dirs):
        name = f"{i:02d}-{folder.name}"
        shutil.copytree(
            folder,
            staged / USER_PATCHES / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.rej", "*.orig"),
        )
        names.append(name)
    if names:
        (staged / USER_PATCHES / "folders").write_text("\n".join(names) + "\n")
    modules = [staged]
    spec = importlib.util.find_spec("unidiff")
    if spec is not None and spec.submodule_search_locations:
        source = Path(next(iter(spec.submodule_search_locations)))
        copied = dest / "unidiff"
        shutil.copytree(source, copied, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        modules.append(copied)
    return modules


def run(
    command: str,
    python: str,
    address: str = "auto",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    strict: bool = False,
    user_dirs: list[Path] | None = None,
) -> ClusterReport:
    """Run ``command`` on every alive node of the Ray cluster at ``address``; judge the answers."""
    if command not in COMMANDS:
        raise ValueError(command)
    exe = Path(os.path.abspath(python))  # the driver runs elsewhere; keep the venv's symlink
    if not exe.exists():
        raise TargetNotFound(f"interpreter {python} does not exist; pass the venv's bin/python")
    driver = scripts.path("ray_driver")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-cluster-") as tmp:
        modules = stage_tool(Path(tmp) / "ship", user_dirs)
        staged = time.perf_counter()
        # Ray puts the driver's working directory on the workers' sys.path: keep it empty.
        workdir = Path(tmp) / "run"
        workdir.mkdir()
        request = {
            "command": command,
            "address": address,
            "strict": strict,
            "timeout": timeout,
            "py_modules": [str(m) for m in modules],
        }
        try:
            proc = run_script(
                exe, [str(driver), json.dumps(request)], timeout=timeout + 120, cwd=workdir
            )
        except ScriptNotRun as exc:
            if exc.timed_out:
                raise ClusterError(
                    f"the Ray driver did not finish within {timeout + 120:.0f} s "
                    f"(cluster at {address})"
                ) from None
            raise TargetNotFound(f"cannot run {python}: {exc.strerror}") from None
        ended = time.perf_counter()
    answer = proc.answer
    if answer is None:
        tail = proc.stderr_tail()
        raise ClusterError(f"the Ray driver under {python} exited {proc.returncode}: {tail}")
    if "error" in answer:
        raise ClusterError(_driver_error(answer["error"], python, address))
    report = ClusterReport(
        command=command,
        address=str(answer.get("address", address)),
        ray_version=str(answer.get("ray_version", "")),
        nodes=[_node_result(n) for n in answer.get("nodes", [])],
        notes=list(answer.get("notes", [])),
        timings={
            "stage": round(staged - started, 3),
            "driver": round(ended - staged, 3),
            **answer.get("timings", {}),
        },
    )
    judge(report)
    return report


def _driver_error(error: dict[str, str], python: str, address: str) -> str:
    kind, message = error.get("kind"), error.get("message", "").rstrip(". ")
    if kind == "no-ray":
        return (
            f"no Ray in the target environment ({python}): {message}; `cluster` reaches the nodes "
            "through Ray, so pass the vLLM venv's interpreter with --python or `pip install ray` there"
        )
    if kind == "no-cluster":
        return (
            f"no Ray cluster at {address}: {message}; start one (`ray start --head`) or pass the "
            "head node's HOST:PORT with --address"
        )
    if kind == "no-nodes":
        return f"the Ray cluster at {address} has no alive node"
    return f"Ray driver failed ({address}): {message}"


def _node_result(data: dict[str, Any]) -> NodeResult:
    node = NodeResult(
        node_id=str(data.get("node_id", "")),
        host=str(data.get("host", "?")),
        ip=str(data.get("ip", "")),
        outcome=str(data.get("outcome", LOST)),
        code=str(data.get("code", "")),
        error=str(data.get("error", "")),
    )
    answer = data.get("answer")
    if not isinstance(answer, dict):
        return node
    node.host = str(answer.get("host", node.host))
    node.tool = answer.get("tool")
    node.seconds = answer.get("seconds")
    error = answer.get("error")
    if isinstance(error, dict):
        node.outcome = FAILED
        node.error = str(error.get("message", ""))
        node.error_exit_code = error.get("exit_code")
    status = answer.get("status")
    if isinstance(status, dict):
        node.vllm_version = status.get("vllm_version")
        node.location = status.get("location")
        node.fingerprint = status.get("fingerprint") or None
        for p in status.get("patches", []):
            node.patches[p["name"]] = p["state"]
            if p.get("detail"):
                node.details[p["name"]] = p["detail"]
    applied = answer.get("apply")
    if isinstance(applied, dict):
        node.changed = list(applied.get("changed", []))
        node.notes = list(applied.get("notes", []))
    report = answer.get("verify")
    if isinstance(report, dict):
        node.verify_ok = bool(report.get("ok"))
        node.verify_tiers = dict(report.get("tiers", {}))
        node.verify_failures = [
            f"{c['tier']}: {c['name']}: {c.get('detail', '')}".rstrip(": ")
            for c in report.get("checks", [])
            if not c.get("ok")
        ]
    return node


def judge(report: ClusterReport) -> None:
    """Fill in each node's problems and the report's: every reason the cluster is not ready."""
    if not report.nodes:
        report.problems.append("no node answered")
    for node in report.nodes:
        node.problems = _node_problems(node, report.command)
        report.problems.extend(f"{node.label}: {p}" for p in node.problems)
    groups = report.fingerprints
    if len(groups) > 1:
        by_id = {n.node_id: n.label for n in report.nodes}
        counts = Counter({fp: len(ids) for fp, ids in groups.items()})
        parts = [
            f"{fp} on {', '.join(by_id[i] for i in groups[fp])}" for fp, _ in counts.most_common()
        ]
        report.problems.append(f"fingerprints differ: {'; '.join(parts)}")


def _node_problems(node: NodeResult, command: str) -> list[str]:
    if node.outcome == LOST:
        return [node.error or "no answer"]
    problems = []
    if node.outcome == FAILED:
        code = f" (exit {node.error_exit_code})" if node.error_exit_code is not None else ""
        problems.append(f"{command} failed: {node.error}{code}")
    pending = [name for name, state in node.patches.items() if state == "pending"]
    if pending:
        problems.append(f"{', '.join(pending)} pending (run `vllm-patcher cluster apply`)")
    for name, state in node.patches.items():
        if state not in OK_STATES and state != "pending":
            why = node.details.get(name, "")
            problems.append(f"{name} {state}" + (f": {why}" if why else ""))
    if node.outcome == ANSWERED and node.verify_ok is False:
        tiers = [t for t, r in node.verify_tiers.items() if r == "failed"]
        first = node.verify_failures[0] if node.verify_failures else "see its checks"
        problems.append(
            f"verify failed in the {', '.join(tiers) or '?'} tier(s) "
            f"({len(node.verify_failures)} failing check(s), first: {first})"
        )
    return problems


__all__ = [
    "ClusterError",
    "ClusterReport",
    "NodeResult",
    "run",
    "run_on_node",
    "stage_tool",
]
