"""verify: prove the patched vLLM will load, tier by tier, cheapest first.

1. compile: every touched file compiles; a failure names file and line and stops verify there,
   well under a second and without importing vLLM.
2. state: every patch that applies to this release is applied (or upstream).
3. import and 4. behaviour: one fresh interpreter of the target environment imports every touched
   module and runs the patches' behaviour checks, ``patches/<patch>/checks/*.py`` (``probe.py``
   loads them and states their API). Skipped for a bare ``--target``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import status as status_mod
from .patchset import Catalogue, Layout, Verdict, layout
from .target import Target

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

    @property
    def ok(self) -> bool:
        return all(v in ("passed", "skipped") for v in self.tiers.values()) and bool(self.tiers)

    def to_dict(self) -> dict[str, object]:
        return {
            "vllm_version": self.vllm_version,
            "location": self.location,
            "ok": self.ok,
            "tiers": self.tiers,
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


def check_files(lay: Layout) -> list[tuple[str, Path]]:
    """The behaviour-check files, ``<patch folder>/checks/*.py``, of every patch this release
    needs or has upstream (a check that cannot apply to the release skips itself)."""
    wanted = (Verdict.APPLICABLE, Verdict.UPSTREAM)
    return [
        (p.name, path)
        for p in lay.catalogue.patches
        if lay.verdicts.get(p.name) in wanted
        for path in p.check_files()
    ]


def probe_request(
    modules: list[str], checks: list[tuple[str, Path]], version: str | None = None
) -> str:
    """The JSON request ``probe.py`` takes as argv[1]."""
    request: dict[str, object] = {
        "modules": modules,
        "checks": [{"patch": name, "path": str(Path(path).resolve())} for name, path in checks],
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
    checks: list[tuple[str, Path]],
    version: str | None = None,
) -> list[Check]:
    """Import ``modules``, then run the ``(patch, file)`` behaviour checks, in ``python``."""
    probe = Path(__file__).with_name("probe.py")
    env = probe_env()
    request = probe_request(modules, checks, version)
    # Another environment's interpreter runs isolated, as it was located; this interpreter keeps
    # the sys.path (PYTHONPATH, user site) through which the tool found vLLM in the first place.
    isolation = [] if Path(python) == Path(sys.executable) else ["-I"]
    try:
        proc = subprocess.run(
            [str(python), *isolation, str(probe), request],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check("import", "probe interpreter", False, f"could not run {python}: {exc}")]
    lines = proc.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
        return [
            Check(c["tier"], c["name"], bool(c["ok"]), c.get("detail", ""), bool(c.get("skipped")))
            for c in data["checks"]
        ]
    except (ValueError, IndexError, KeyError, TypeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [
            Check("import", "probe interpreter", False, f"probe exited {proc.returncode}: {tail}")
        ]


def verify(
    target: Target, catalogue: Catalogue, on_tier: Callable[[str], None] | None = None
) -> VerifyReport:
    report = VerifyReport(target.version, str(target.site_packages))
    lay = layout(catalogue, target.version, target.record)
    rels = [
        r for r in catalogue.paths_for(target.version) if r in target.record and r.endswith(".py")
    ]

    if on_tier:
        on_tier("compile")
    report.checks.extend(compile_tier(target, rels))
    if not _conclude(report, "compile"):
        report.tiers.update({"state": "not-run", "import": "not-run", "behaviour": "not-run"})
        return report

    if on_tier:
        on_tier("state")
    st = status_mod.read_status(target, catalogue)
    for p in st.patches:
        ok = p.state in ("applied", "upstream", "not-applicable")
        hint = " (run `vllm-patcher apply`)" if p.state in ("pending", "unrecorded") else ""
        report.checks.append(Check("state", p.name, ok, f"{p.state}{hint}. {p.detail}".strip(". ")))
    _conclude(report, "state")

    if target.python is None:
        report.tiers.update({"import": "skipped", "behaviour": "skipped"})
        return report
    if on_tier:
        on_tier("import")
    modules = [module_name(rel) for rel in rels]
    report.checks.extend(run_probe(target.python, modules, check_files(lay), target.version))
    _conclude(report, "import")
    if any(c.tier == "behaviour" for c in report.checks):
        _conclude(report, "behaviour")
    else:
        report.tiers["behaviour"] = "not-run"
    return report
