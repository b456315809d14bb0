"""``verify``: every touched file compiles, imports and behaves, in the target's interpreter."""

from __future__ import annotations

import click

from ... import progress
from ..app import Command, pass_app
from ..base import Application, chosen_line
from ..render import patching as render
from . import choice as choice_mod


@click.command(cls=Command)
@choice_mod.model_option
@click.argument("names", nargs=-1)
@pass_app
def verify(app: Application, model: str | None, names: tuple[str, ...]) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    NAMES or --model judge only those patches (and what they need); with neither, the patches an
    earlier apply NAME... / apply --model chose, else every patch. Stops after the state tier
    when a judged patch is not applied, and names the command that fixes it.
    """
    # verify's module is only loaded for verify
    from ...patching.verify import BUSY, TIERS
    from ...patching.verify import verify as run_verify

    opts = app.options
    target = opts.target()
    sel = choice_mod.select(opts, target, names, model)
    if not opts.as_json:
        app.echo(chosen_line(target))
        line = choice_mod.said(sel)
        if line is not None:
            app.echo(line, err=True)
    steps = progress.Progress.for_stderr(opts.as_json, prefix="verify")

    def on_tier(tier: str) -> None:
        # the probe runs both tiers in one interpreter: its progress names both
        steps.step("import and behaviour tiers" if tier == "import" else f"{tier} tier")

    with steps:
        report = run_verify(target, sel.catalogue, on_tier=on_tier)
    app.show(render.verify(report, TIERS, BUSY))
