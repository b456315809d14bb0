"""``revert``: every touched file back to the bytes pip installed."""

from __future__ import annotations

import click

from ...patching import chosen
from ...patching.journal import left_in_place
from ..app import Command, pass_app
from ..base import Application, waiting
from ..render import patching as render


@click.command(cls=Command)
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@pass_app
def revert(app: Application, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    from ...patching import txn  # status never loads the transaction (plan, diffs)

    opts = app.options
    target = opts.target()
    chosen.check_removable(target.site_packages)  # refused before any file changes
    result = txn.revert(target, force=force, on_wait=waiting(opts, "revert"))
    chosen.forget(target.site_packages)  # every file is pristine: no choice stands
    app.show(render.revert(result, target, left_in_place(target.site_packages)))
