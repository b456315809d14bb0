"""``list``: the catalogue, where each patch comes from, and what apply does on each release."""

from __future__ import annotations

import click

from ...catalogue.layout import release_matrix, release_row
from ...errors import BadSetting
from ..app import Command, pass_app
from ..base import Application
from ..render import patching as render


@click.command("list", cls=Command)
@click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    default=None,
    help="Only this release: what apply does there, patch by patch.",
)
@click.option(
    "--all", "every", is_flag=True, help="Every pinned release, even when an environment is named."
)
@pass_app
def list_(app: Application, vllm_version: str | None, every: bool) -> None:
    """The catalogue: every patch, where it comes from, and what apply does on each release
    (the named environment's release alone when --python or --target is given)."""
    from ...doctor.rules import release_version

    opts = app.options
    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python, opts.directory) != (None, None) else None
    if vllm_version is not None:
        if every:
            raise BadSetting("give --vllm-version X (one release) or --all (every one), not both")
        release_version(vllm_version)  # a usage error for a version that is not one
        vllm_version = vllm_version[1:] if vllm_version[:1] in "vV" else vllm_version
    one = vllm_version or (installed.version if installed is not None and not every else None)
    rows = [release_row(catalogue, one)] if one is not None else release_matrix(catalogue)
    app.show(render.list_(catalogue, rows, installed, render.terminal_width()))
