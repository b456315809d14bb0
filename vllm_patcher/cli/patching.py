"""status, apply, verify, revert, list: what the patches do to the environment."""

from __future__ import annotations

import click

from .. import progress
from ..catalogue.layout import release_matrix
from ..patching import status as status_mod
from ..patching.journal import left_in_place
from .app import Command, pass_app
from .base import Application, check_names, chosen_line, waiting
from .render import patching as render


@click.command(cls=Command)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 unless every patch is applied, upstream or not-applicable (a CI gate).",
)
@pass_app
def status(app: Application, check: bool) -> None:
    """Show the vLLM release and the state of every patch (never waits for a running apply).

    With --check, exit 1 when any patch is pending, outdated, drifted, unrecorded or unported, or
    another run is changing the environment right now.
    """
    opts = app.options
    target = opts.target()
    app.show(render.status(status_mod.read_status(target, opts.catalogue()), target, check))


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
@pass_app
def apply(app: Application, dry_run: bool, strict: bool, names: tuple[str, ...]) -> None:
    """Apply every pending patch (or only NAMES), all files or none."""
    from ..patching import txn  # status never loads the transaction (plan, diffs)

    opts = app.options
    check_names(*names)
    target = opts.target()
    catalogue = opts.catalogue(names)
    if not (opts.as_json or dry_run):  # a dry run's stdout is the diff, and it changes nothing
        app.echo(chosen_line(target))
    result = txn.apply(
        target, catalogue, dry_run=dry_run, strict=strict, on_wait=waiting(opts, "apply")
    )
    app.show(render.apply(result, dry_run))


@click.command(cls=Command)
@pass_app
def verify(app: Application) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    Stops after the state tier when a patch is not applied, and names the command that fixes it.
    """
    # verify's module is only loaded for verify
    from ..patching.verify import BUSY, TIERS
    from ..patching.verify import verify as run_verify

    opts = app.options
    target = opts.target()
    catalogue = opts.catalogue()
    if not opts.as_json:
        app.echo(chosen_line(target))
    steps = progress.Progress.for_stderr(opts.as_json, prefix="verify")

    def on_tier(tier: str) -> None:
        # the probe runs both tiers in one interpreter: its progress names both
        steps.step("import and behaviour tiers" if tier == "import" else f"{tier} tier")

    with steps:
        report = run_verify(target, catalogue, on_tier=on_tier)
    app.show(render.verify(report, TIERS, BUSY))


@click.command(cls=Command)
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@pass_app
def revert(app: Application, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    from ..patching import txn  # status never loads the transaction (plan, diffs)

    opts = app.options
    target = opts.target()
    result = txn.revert(target, force=force, on_wait=waiting(opts, "revert"))
    app.show(render.revert(result, target, left_in_place(target.site_packages)))


@click.command("list", cls=Command)
@pass_app
def list_(app: Application) -> None:
    """The catalogue: every patch, where it comes from, and which releases it has diffs for."""
    opts = app.options
    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python, opts.directory) != (None, None) else None
    app.show(render.list_(catalogue, release_matrix(catalogue), installed))
