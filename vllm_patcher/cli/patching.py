"""status, apply, verify, revert, list: what the patches do to the environment."""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import progress
from .. import status as status_mod
from ..catalogue import support
from ..catalogue.layout import release_matrix
from ..errors import (
    EXIT_CHECK_FAILED,
)
from ..install import target as target_mod
from ..journal import left_in_place
from .app import (
    Command,
    Options,
    check_names,
    chosen_line,
    echo,
    json_report,
    waiting,
)


def _status_lines(st: status_mod.Status, target: target_mod.Target | None = None) -> list[str]:
    lines = [
        f"vLLM {st.vllm_version} ({st.distribution}) at {st.location}"
        + f" ({st.shape} install, judged against {st.reference})",
        *([chosen_line(target)] if target is not None else []),
        f"release: {st.release}   fingerprint: {st.fingerprint}",
    ]
    if st.in_progress:
        lines.append(
            "another vllm-patcher run is changing this environment right now; "
            "run status again when it is done"
        )
    elif st.interrupted:
        lines.append(
            f"an earlier {st.interrupted} run was interrupted; run apply or revert to recover"
        )
    for p in st.patches:
        method = p.method or "-"
        files = ", ".join(p.files) if p.files else "-"
        origin = "" if p.origin == "built-in" else f"   [{p.origin}]"
        lines.append(f"  {p.name:<22} {p.state.value:<15} {method:<12} {files}{origin}")
        if p.detail and p.state not in (
            status_mod.PatchState.APPLIED,
            status_mod.PatchState.UPSTREAM,
        ):
            lines.append(f"      {p.detail}")
    return lines


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
    target = opts.target()
    st = status_mod.read_status(target, opts.catalogue())
    code = EXIT_CHECK_FAILED if check and not st.ready else 0
    if opts.as_json:
        json_report(
            code,
            {
                **st.to_dict(),
                "chosen_by": target.chosen_by,
                "python": str(target.python) if target.python is not None else None,
            },
        )
    else:
        echo("\n".join(_status_lines(st, target)))
    if code:
        sys.exit(code)


@click.command(cls=Command)
@click.option("--dry-run", is_flag=True, help="Print the unified diff and write nothing.")
@click.option(
    "--strict", is_flag=True, help="Refuse unless a pinned diff matches this release exactly."
)
@click.argument("names", nargs=-1)
@click.pass_obj
def apply(opts: Options, dry_run: bool, strict: bool, names: tuple[str, ...]) -> None:
    """Apply every pending patch (or only NAMES), all files or none."""
    from .. import txn  # status never loads the transaction (plan, diffs)

    check_names(*names)
    target = opts.target()
    catalogue = opts.catalogue(names)
    if not (opts.as_json or dry_run):  # a dry run's stdout is the diff, and it changes nothing
        echo(chosen_line(target))
    result = txn.apply(
        target, catalogue, dry_run=dry_run, strict=strict, on_wait=waiting(opts, "apply")
    )
    st = result.status
    assert st is not None
    methods = result.methods
    if opts.as_json:
        json_report(0, result.to_dict())
        return
    if dry_run:
        if result.diff:
            echo(result.diff, nl=False)
        elif result.edits:
            echo(f"would adopt {', '.join(result.adopted)} (already patched by hand)", err=True)
        else:
            echo("nothing to apply", err=True)
        for note in result.notes:
            echo(f"note: {note}", err=True)
        return
    for rel in result.recovered:
        echo(f"recovered {rel} from an interrupted run")
    for note in result.notes:
        echo(f"note: {note}")
    echo(f"vLLM {st.vllm_version} at {st.location}")
    for p in st.patches:
        if p.name in methods:
            how = methods[p.name]
            verb = (
                "adopted (already patched by hand; now recorded)"
                if how == "adopted"
                else "applied now"
            )
            how = "pinned-diff" if how == "adopted" else how
        else:
            verb, how = p.state.value, p.method or ""
        echo(f"  {p.name:<22} {verb}" + (f" ({how})" if how else ""))
    if not result.edits:
        echo("nothing to do")


# verify's progress names what runs: the probe runs both tiers in one interpreter.
_TIER_STEPS = {"import": "import and behaviour tiers"}


@click.command(cls=Command)
@click.pass_obj
def verify(opts: Options) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    Stops after the state tier when a patch is not applied, and names the command that fixes it.
    """
    # verify's module is only loaded for verify
    from ..verify import TIERS
    from ..verify import verify as run_verify

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
        if report.ok:
            echo("verify: OK")
        elif report.tiers.get("import") == "not-run" and report.tiers.get("state") == "failed":
            then = f"run `{report.fix}` first" if report.fix else "fix what the state tier names"
            echo(f"verify: FAILED: stopped after the state tier; {then}, then verify again")
        else:
            echo("verify: FAILED")
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@click.command(cls=Command)
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@click.pass_obj
def revert(opts: Options, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    from .. import txn  # status never loads the transaction (plan, diffs)

    target = opts.target()
    result = txn.revert(target, force=force, on_wait=waiting(opts, "revert"))
    if opts.as_json:
        json_report(
            0,
            {
                "vllm_version": target.version,
                "location": str(target.site_packages),
                **result.to_dict(),
            },
        )
        return
    if not (result.restored or result.already_pristine or result.recovered):
        echo("nothing applied; nothing to revert")
        return
    for rel in result.recovered:
        echo(f"restored {rel} (an interrupted run had left it patched)")
    for rel in result.restored:
        echo(f"restored {rel}")
    for rel, where in result.saved_edits.items():
        echo(f"your edited {rel} was kept at {where}")
    for rel in result.already_pristine:
        echo(f"{rel} was already pristine")
    echo(left_in_place(target.site_packages))


@click.command("list", cls=Command)
@click.pass_obj
def list_(opts: Options) -> None:
    """The catalogue: every patch, where it comes from, and which releases it has diffs for."""
    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python or opts.directory) else None
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
            "supported": support.supported_range(),
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
    echo(f"{'<' + str(support.first_patchable()):<10}refused (no EAGLE-3 allow-list to widen)")
    echo(
        "other releases in range: libcst transforms for the built-ins that have one (apply "
        "--strict refuses); the others are unported there"
    )
