"""``list``: the catalogue, where each patch comes from, the releases it has diffs for."""

from __future__ import annotations

import click

from ...catalogue.layout import release_matrix
from ..app import Command, pass_app
from ..base import Application
from ..render import patching as render


@click.command("list", cls=Command)
@pass_app
def list_(app: Application) -> None:
    """The catalogue: every patch, where it comes from, and which releases it has diffs for."""
    opts = app.options
    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python, opts.directory) != (None, None) else None
    app.show(render.list_(catalogue, release_matrix(catalogue), installed))
