"""``status``: the release and the state of every patch."""

from __future__ import annotations

import click

from ...patching import status as status_mod
from ..app import Command, pass_app
from ..base import Application
from ..render import patching as render


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
