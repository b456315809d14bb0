"""``port``: a patch carried to other releases by a three-way merge."""

from __future__ import annotations

from pathlib import Path

import click

from ...errors import BadSetting
from ...wheels.sources import wheels_by_release
from ..app import Command, pass_app
from ..base import Application, check_names
from ..render import authoring as render
from ._shared import wheel_option


@click.command(cls=Command)
@click.argument("name")
@click.option(
    "--to", "versions", multiple=True, metavar="VERSION", help="A release to port to (repeatable)."
)
@click.option(
    "--all", "all_releases", is_flag=True, help="Every release its specifier covers below fixed_in."
)
@click.option(
    "--continue",
    "resume",
    is_flag=True,
    help="Turn resolved conflict files into the release's diff.",
)
@wheel_option
@pass_app
def port(
    app: Application,
    name: str,
    versions: tuple[str, ...],
    all_releases: bool,
    resume: bool,
    wheel_files: tuple[Path, ...],
) -> None:
    """Carry patch NAME to other vLLM releases by a three-way merge per file.

    Writes NAME/vllm-VERSION/ for every release that merges cleanly; a conflict leaves the merged
    files with markers under NAME/conflicts/vllm-VERSION/ for `--continue`. Never touches vLLM.
    """
    from ...authoring import porting  # three-way merges: port only

    opts = app.options
    check_names(name)
    if versions and all_releases:
        raise BadSetting("port needs --to VERSION (repeatable) or --all, not both")
    if resume and all_releases:
        raise BadSetting("--continue works on the releases named with --to, not --all")
    if not (versions or all_releases or wheel_files):
        raise BadSetting("port needs --to VERSION (repeatable), --all, or --wheel FILE")
    catalogue = opts.catalogue()
    patch = catalogue.get(name)
    if patch is None:
        raise BadSetting(f"no patch named {name!r}; known: {', '.join(catalogue.names)}")
    wheels = wheels_by_release(wheel_files)
    targets = porting.releases_to_port(catalogue, patch, versions, all_releases, wheels)
    result = porting.port(catalogue, name, targets, resume=resume, wheels=wheels)
    conflicted = [r.version for r in result.having(porting.CONFLICT)]
    # --continue with markers left is a refusal for those releases (the others were written)
    refusal = porting.markers_left(patch, result) or porting.not_carried(result)
    app.show(render.port(result, patch, conflicted, refusal))
