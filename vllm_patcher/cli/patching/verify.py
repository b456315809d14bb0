"""``verify``: every touched file compiles, imports and behaves, in the target's interpreter."""

from __future__ import annotations

import click

from ... import progress
from ..app import Command, pass_app
from ..base import Application, chosen_line
from ..render import patching as render


@click.command(cls=Command)
@pass_app
def verify(app: Application) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    Stops after the state tier when a patch is not applied, and names the command that fixes it.
    """
    # verify's module is only loaded for verify
    from ...patching.verify import BUSY, TIERS
    from ...patching.verify import verify as run_verify

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
