"""status, apply, verify, revert, list: what the patches do to the environment."""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import progress
from ..catalogue import support
from ..catalogue.layout import release_matrix
from ..errors import (
    EXIT_CHECK_FAILED,
)
from . import fast
from .app import Command, json_report
from .base import Options, chosen_line, echo


@click.command(cls=Command)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 unless every patch is applied, upstream or not-applicable (a CI gate).",
)
@click.pass_obj
def status(opts: Options, check: bool) -> None:
    """Show the vLLM release and the state of every patch (never waits for a running apply).

    With --check, exit 1 when any patch is pending, outdated, drifted, unrecorded or unported, or
    another run is changing the environment right now.
    """
    fast.status(opts, check)


@click.command(cls=Command)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the unified diff; change no file (only the lock is taken).",
)
@click.option(
    "--strict", is_flag=True, help="Refuse unless a pinned diff matches this release exactly."
)
@click.argument("names", nargs=-1)
@click.pass_obj
def apply(opts: Options, dry_run: bool, strict: bool, names: tuple[str, ...]) -> None:
    """Apply every pending patch (or only NAMES), all files or none."""
    fast.apply(opts, dry_run, strict, names)


# verify's progress names what runs: the probe runs both tiers in one interpreter.
_TIER_STEPS = {"import": "import and behaviour tiers"}


@click.command(cls=Command)
@click.pass_obj
def verify(opts: Options) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    Stops after the state tier when a patch is not applied, and names the command that fixes it.
    """
    # verify's module is only loaded for verify
    from ..patching.verify import BUSY, TIERS
    from ..patching.verify import verify as run_verify

    target = opts.target()
    catalogue = opts.catalogue()
    if not opts.as_json:
        echo(chosen_line(target))
    steps = progress.Progress.for_stderr(opts.as_json, prefix="verify")

    def on_tier(tier: str) -> None:
        steps.step(_TIER_STEPS.get(tier, f"{tier} tier"))

    with steps:
        report = run_verify(target, catalogue, on_tier=on_tier)
    if opts.as_json:
        json_report(0 if report.ok else EXIT_CHECK_FAILED, report.to_dict())
    else:
        echo(f"vLLM {report.vllm_version} at {report.location}")
        for tier in TIERS:
            result = report.tiers.get(tier, "not-run")
            checks = [c for c in report.checks if c.tier == tier]
            skipped = sum(c.skipped for c in checks)
            ran = len(checks) - skipped
            passed = sum(c.ok and not c.skipped for c in checks)
            counts = f" ({passed}/{ran})" if ran else ""
            if skipped:
                counts = f"{counts} ({skipped} not applicable)"
            why = f" ({report.not_run[tier]})" if tier in report.not_run else ""
            echo(f"  {tier:<10} {result}{counts}{why}")
            for c in checks:
                if not c.ok:
                    echo(f"      FAIL {c.name}: {c.detail}")
                elif c.skipped:
                    echo(f"      n/a  {c.name}: {c.detail}")
        unproven = [t for t in TIERS if report.tiers.get(t) == "skipped"]
        if report.ok and unproven:  # say what was proven: --target has no interpreter to import
            proven = [t for t in TIERS if report.tiers.get(t) == "passed"]
            echo(
                f"verify: OK for the {' and '.join(proven)} tiers only; {' and '.join(unproven)} "
                f"not run ({report.not_run.get(unproven[0], 'skipped')}): verify with --python "
                "and the interpreter that will serve proves the patches load"
            )
        elif report.ok:
            echo("verify: OK")
        elif report.tiers.get("import") == "not-run" and report.tiers.get("state") == "failed":
            if report.not_run.get("import") == BUSY:
                echo(f"verify: FAILED: stopped after the state tier; {BUSY}")
            else:
                then = (
                    f"run `{report.fix}` first" if report.fix else "fix what the state tier names"
                )
                echo(f"verify: FAILED: stopped after the state tier; {then}, then verify again")
        else:
            echo(
                "verify: FAILED" + (f"; `{report.fix}` fixes the state tier" if report.fix else "")
            )
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@click.command(cls=Command)
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@click.pass_obj
def revert(opts: Options, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    fast.revert(opts, force)


@click.command("list", cls=Command)
@click.pass_obj
def list_(opts: Options) -> None:
    """The catalogue: every patch, where it comes from, and which releases it has diffs for."""
    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python, opts.directory) != (None, None) else None
    rows = release_matrix(catalogue)
    patches = [
        {
            "name": p.name,
            "origin": p.origin,
            "summary": p.summary,
            "releases": str(p.releases),
            "fixed_in": str(p.fixed_in) if p.fixed_in else None,
            "pinned_versions": list(p.pinned_versions),
            "files": p.all_paths(),
        }
        for p in catalogue.patches
    ]
    if opts.as_json:
        data: dict[str, Any] = {
            "patches": patches,
            "releases": rows,
            "supported": support.supported_range(catalogue),
        }
        if installed is not None:
            data["installed"] = {
                "vllm_version": installed.version,
                "site_packages": str(installed.site_packages),
            }
        json_report(0, data)
        return
    for p in catalogue.patches:
        fixed = f", upstream from {p.fixed_in}" if p.fixed_in else ""
        echo(f"{p.name:<22} {p.summary}")
        echo(f"{'':<22} releases {p.releases or 'any'}{fixed}; from {p.origin}")
    echo("")
    names = catalogue.names
    echo(f"{'release':<10}" + "".join(f"{n[:22]:<24}" for n in names))
    for row in rows:
        mark = "*" if installed is not None and row["version"] == installed.version else ""
        release = f"{row['version']}{mark}"
        echo(f"{release:<10}" + "".join(f"{row['patches'][n]:<24}" for n in names))
    if installed is not None:
        echo(f"* installed at {installed.site_packages} ({chosen_line(installed)})")
    echo(
        f"{'<' + str(support.first_patchable(catalogue)):<10}refused (no EAGLE-3 allow-list to widen)"
    )
    echo(
        "other releases in range: libcst transforms for the built-ins that have one (apply "
        "--strict refuses); the others are unported there"
    )
