"""``apply``: every pending patch (or the ones named), all files or none."""

from __future__ import annotations

import click

from ..app import Command, pass_app
from ..base import Application, check_names, chosen_line, waiting
from ..render import patching as render


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
    from ...patching import txn  # status never loads the transaction (plan, diffs)

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
