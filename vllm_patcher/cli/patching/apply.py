"""``apply``: every pending patch (or the ones named, or a model's), all files or none."""

from __future__ import annotations

import click

from ...patching import chosen as chosen_mod
from ..app import Command, pass_app
from ..base import Application, chosen_line, waiting
from ..render import patching as render
from . import choice as choice_mod


@click.command(cls=Command)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the unified diff; change no file (only the lock is taken).",
)
@click.option(
    "--strict", is_flag=True, help="Refuse unless a pinned diff matches this release exactly."
)
@choice_mod.model_option
@click.argument("names", nargs=-1)
@pass_app
def apply(
    app: Application, dry_run: bool, strict: bool, model: str | None, names: tuple[str, ...]
) -> None:
    """Apply every pending patch (or only NAMES and what they need, or what --model's family
    needs), all files or none. The choice is recorded: a later status and verify judge it."""
    from ...patching import txn  # status never loads the transaction (plan, diffs)

    opts = app.options
    target = opts.target()
    sel = choice_mod.select(opts, target, names, model)
    root = target.site_packages
    earlier = chosen_mod.read(root)  # an unreadable record refuses before any file changes
    if not (opts.as_json or dry_run):  # a dry run's stdout is the diff, and it changes nothing
        app.echo(chosen_line(target))
        line = choice_mod.said(sel)
        if line is not None:
            app.echo(line, err=True)
        for need, by in sel.pulled.items():
            app.echo(f"also applying {need}: {by} needs it", err=True)
    result = txn.apply(
        target, sel.catalogue, dry_run=dry_run, strict=strict, on_wait=waiting(opts, "apply")
    )
    if not dry_run and sel.choice is not None:
        order = {n: i for i, n in enumerate(sel.catalogue.names)}
        chosen_mod.write(root, chosen_mod.merged(earlier, sel.choice, order))
    app.show(render.apply(result, dry_run, sel.catalogue))
