"""``status``: the release and the state of every patch (or of the chosen ones)."""

from __future__ import annotations

import click

from ...patching import status as status_mod
from ..app import Command, pass_app
from ..base import Application
from ..render import patching as render
from . import choice as choice_mod


@click.command(cls=Command)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 unless every chosen patch is applied, upstream or not-applicable (a CI gate).",
)
@choice_mod.model_option
@click.argument("names", nargs=-1)
@pass_app
def status(app: Application, check: bool, model: str | None, names: tuple[str, ...]) -> None:
    """Show the vLLM release and the state of every patch (never waits for a running apply).

    NAMES or --model judge only those patches (and what they need); with neither, the patches an
    earlier apply NAME... / apply --model chose, else every patch. With --check, exit 1 when a
    judged patch is pending, outdated, drifted, unrecorded or unported, or another run is
    changing the environment right now; the last line says which.
    """
    opts = app.options
    target = opts.target()
    sel = choice_mod.select(opts, target, names, model)
    line = choice_mod.said(sel)
    if line is not None and not opts.as_json:
        app.echo(line, err=True)
    st = status_mod.read_status(target, sel.catalogue)
    app.show(render.status(st, target, check, sel.catalogue))
