"""verify: prove the patched vLLM will load, tier by tier, cheapest first.

1. compile: every touched file compiles; a failure names file and line and stops verify there,
   well under a second and without importing vLLM.
2. state: every patch that applies to this release is applied (or upstream). When a patch is
   not in the files at all (``pending``, ``unported``, or a run in progress), verify stops here
   and names the command that fixes it (``fix``): importing vLLM takes seconds and would only
   test files that are not patched yet. Files that hold other bytes than the record says
   (``drifted``, ``unrecorded``) or than the patches given now produce (``outdated``: an earlier
   version of them) fail this tier but still go through the next two, which say whether those
   bytes load and behave.
3. import and 4. behaviour: one fresh interpreter of the target environment imports every touched
   module and runs the patches' behaviour checks, ``patches/<patch>/checks/*.py`` (``scripts/probe.py``
   loads them and states their API). Skipped for a bare ``--target``.

Every tier that did not run has its reason in ``not_run``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..catalogue import support
from ..catalogue.layout import Layout, Verdict, layout
from ..catalogue.model import Catalogue
from ..install.target import Target
from ..intarget import scripts
from ..releases import has_allow_list
from ..runtime import ScriptNotRun, run_script
from . import status as status_mod
from .states import READY, PatchState, Status
from .survey import apply_command

TIERS = ("compile", "state", "import", "behaviour")


@dataclass
class Check:
    tier: str
    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False  # not applicable to this release (ok, never a failure); detail says why


@dataclass
class VerifyReport:
    vllm_version: str
    location: str
    checks: list[Check] = field(default_factory=list)
    tiers: dict[str, str] = field(default_factory=dict)  # passed | failed | skipped | not-run
    not_run: dict[str, str] = field(default_factory=dict)  # tier -> why it did not run
    fix: str | None = None  # the command that fixes a failed state tier, when one does

    @property
    def ok(self) -> bool:
        return all(v in ("passed", "skipped") for v in self.tiers.values()) and bool(self.tiers)

    def to_dict(self) -> dict[str, object]:
        return {
            "vllm_version": self.vllm_version,
            "location": self.location,
            "ok": self.ok,
            "tiers": self.tiers,
            "not_run": self.not_run,
            "fix": self.fix,
            "checks": [asdict(c) for c in self.checks],
        }


def _conclude(report: VerifyReport, tier: str) -> bool:
    mine = [c for c in report.checks if c.tier == tier]
    passed = all(c.ok for c in mine)
    report.tiers[tier] = "passed" if passed else "failed"
    return passed


def compile_tier(target: Target, rels: list[str]) -> list[Check]:
    checks = []
    for rel in rels:
        path = target.path(rel)
        try:
            source = path.read_bytes()
        except OSError as exc:
            checks.append(Check("compile", rel, False, f"{path}: cannot read ({exc.strerror})"))
            continue
        try:
            compile(source, str(path), "exec", dont_inherit=True)
            checks.append(Check("compile", rel, True))
        except SyntaxError as exc:
            checks.append(
                Check(
                    "compile",
                    rel,
                    False,
                    f"{path}:{exc.lineno}: {exc.msg} (a typo left by an edit?)",
                )
            )
    return checks


def module_name(rel: str) -> str:
    """The module a file under site-packages is imported as: ``vllm/a/b.py`` -> ``vllm.a.b``."""
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# The checks every family backport gets from its [family] table, run with it as ctx.family.
FAMILY_CHECKS = Path(__file__).resolve().parent.parent / "intarget" / "checklib" / "backport.py"


def check_files(lay: Layout) -> list[tuple[str, Path] | tuple[str, Path, dict[str, Any]]]:
    """The behaviour-check files, ``<patch folder>/checks/*.py``, of every patch this release
    needs or has upstream (a check that cannot apply to the release skips itself), and for a
    family backport the family checks with its description; with a chosen set (``apply NAME``,
    ``--model``), only the chosen patches' checks: the others are not judged."""
    wanted = (Verdict.APPLICABLE, Verdict.UPSTREAM)
    out: list[tuple[str, Path] | tuple[str, Path, dict[str, Any]]] = []
    for p in lay.catalogue.patches:
        if lay.verdicts.get(p.name) not in wanted or not lay.catalogue.is_selected(p.name):
            continue
        if p.family is not None:
            out.append((p.name, FAMILY_CHECKS, p.family.as_json(lay.version)))
        out.extend((p.name, path) for path in p.check_files())
    return out


def probe_request(
    modules: list[str],
    checks: Sequence[tuple[str, Path] | tuple[str, Path, dict[str, Any]]],
    version: str | None = None,
    upstream: frozenset[str] = frozenset(),
    allow_list: bool = False,
) -> str:
    """The JSON request ``scripts/probe.py`` takes as argv[1]; the tool's verdicts on the release, which
    the checks read and never work out again: ``upstream``, the patches it counts as upstream in
    this release (``ctx.upstream`` in their checks), ``allow_list``, whether the release's
    SpeculativeConfig has the EAGLE-3 allow-list (``ctx.allow_list``)."""
    entries = []
    for check in checks:
        entry: dict[str, Any] = {"patch": check[0], "path": str(Path(check[1]).resolve())}
        if len(check) > 2:
            entry["family"] = check[2]
        entries.append(entry)
    request: dict[str, object] = {
        "modules": modules,
        "checks": entries,
        "upstream": sorted(upstream),
        "allow_list": allow_list,
    }
    if version:
        request["version"] = version
    return json.dumps(request)


def probe_env() -> dict[str, str]:
    env = dict(os.environ)
    # The checks build configs from local folders only; never wait on the Hugging Face hub.
    # No bytecode either: the check files live in the tool's installed package.
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def run_probe(
    python: Path,
    modules: list[str],
    checks: Sequence[tuple[str, Path] | tuple[str, Path, dict[str, Any]]],
    version: str | None = None,
    upstream: frozenset[str] = frozenset(),
    allow_list: bool = False,
) -> list[Check]:
    """Import ``modules``, then run the ``(patch, file)`` behaviour checks, in ``python``."""
    probe = scripts.path("probe")
    env = probe_env()
    request = probe_request(modules, checks, version, upstream, allow_list)
    # Another environment's interpreter runs isolated, as it was located; this interpreter keeps
    # the sys.path (PYTHONPATH, user site) through which the tool found vLLM in the first place.
    isolated = Path(python) != Path(sys.executable)
    try:
        proc = run_script(python, [str(probe), request], timeout=600, isolated=isolated, env=env)
    except ScriptNotRun as exc:
        return [Check("import", "probe interpreter", False, f"could not run {python}: {exc.cause}")]
    try:
        return [
            Check(c["tier"], c["name"], bool(c["ok"]), c.get("detail", ""), bool(c.get("skipped")))
            for c in (proc.answer or {})["checks"]
        ]
    except (KeyError, TypeError, ValueError):
        tail = proc.stderr_tail()
        return [
            Check("import", "probe interpreter", False, f"probe exited {proc.returncode}: {tail}")
        ]


def _touched_modules(lay: Layout, record: dict[str, str]) -> list[str]:
    """The modules of the files a patch changes on this release (``lay.steps``): a file only an
    upstream patch names is the release's own, and whether it imports in this interpreter (the
    CPU build's qwen3_vl needs torchvision) is no verdict on a patch."""
    return [module_name(rel) for rel in sorted(lay.steps) if rel in record and rel.endswith(".py")]


def probe_tiers(target: Target, catalogue: Catalogue) -> list[Check]:
    """The import and behaviour tiers' checks, whatever the state tier says (verify runs them
    only once it passes; on an unpatched release they show what is missing)."""
    assert target.python is not None, "the probe runs in the target's interpreter"
    lay = layout(catalogue, target.version, target.record)
    upstream = frozenset(n for n, v in lay.verdicts.items() if v == Verdict.UPSTREAM)
    return run_probe(
        target.python,
        _touched_modules(lay, target.record),
        check_files(lay),
        target.version,
        upstream,
        has_allow_list(target.version),
    )


def state_fix(target: Target, catalogue: Catalogue, st: Status) -> str | None:
    """The one command that makes a failed state tier pass, or None when there is no single one
    (local edits, a run in progress, a patch without a diff for this release: their details say).

    It names the environment the way every other hint does (``Target.command``), and the folders
    of the user's patches it needs (``--patches``)."""
    if st.in_progress:
        return None
    todo = (
        PatchState.PENDING,
        PatchState.UNRECORDED,
        PatchState.OUTDATED,
    )
    failing = [p for p in st.patches if p.state not in READY]
    if not failing or not (st.interrupted or all(p.state in todo for p in failing)):
        return None
    return apply_command(target, catalogue, [p.name for p in failing])


# why the slow tiers did not run after a failed state tier (the CLI's last line tells them apart)
BUSY = "another vllm-patcher run is changing the files right now; verify again when it is done"
NOT_PATCHED = "a patch is not in the files yet"


def _not_patched(st: Status) -> bool:
    """A patch is missing from the files (or a run is changing them): the slow tiers would only
    confirm that."""
    missing = (PatchState.PENDING, PatchState.UNPORTED)
    return st.in_progress or any(p.state in missing for p in st.patches)


def _not_run(report: VerifyReport, tiers: tuple[str, ...], why: str) -> None:
    for tier in tiers:
        report.tiers[tier] = "not-run"
        report.not_run[tier] = why


def verify(
    target: Target, catalogue: Catalogue, on_tier: Callable[[str], None] | None = None
) -> VerifyReport:
    """Run the tiers in order; ``on_tier(tier)`` is called as each one starts (``import`` runs
    the behaviour checks in the same interpreter, so ``behaviour`` never starts on its own)."""
    support.classify(
        catalogue, target.version
    )  # a refusal is one error line, before any tier's progress
    report = VerifyReport(target.version, str(target.site_packages))
    rels = [
        r for r in catalogue.paths_for(target.version) if r in target.record and r.endswith(".py")
    ]

    if on_tier:
        on_tier("compile")
    report.checks.extend(compile_tier(target, rels))
    if not _conclude(report, "compile"):
        _not_run(report, ("state", "import", "behaviour"), "the compile tier failed")
        return report

    if on_tier:
        on_tier("state")
    st = status_mod.read_status(target, catalogue)
    report.fix = state_fix(target, catalogue, st)
    for p in st.patches:
        if p.state is PatchState.NOT_CHOSEN:  # another patch was chosen: not judged
            continue
        ok = p.state in READY
        report.checks.append(Check("state", p.name, ok, f"{p.state}. {p.detail}".strip(". ")))
    if not _conclude(report, "state") and _not_patched(st):
        # Importing would test files that are not (all) patched: seconds spent on a known answer.
        _not_run(report, ("import", "behaviour"), BUSY if st.in_progress else NOT_PATCHED)
        return report

    if target.python is None:
        report.tiers.update({"import": "skipped", "behaviour": "skipped"})
        report.not_run.update(dict.fromkeys(("import", "behaviour"), "no interpreter (--target)"))
        return report
    if on_tier:
        on_tier("import")
    report.checks.extend(probe_tiers(target, catalogue))
    _conclude(report, "import")
    if any(c.tier == "behaviour" for c in report.checks):
        _conclude(report, "behaviour")
    else:
        _not_run(report, ("behaviour",), "the probe ran no behaviour check")
    return report
