"""``capture``: your edits of the installed vLLM as a patch folder."""

from __future__ import annotations

from pathlib import Path

import click

from ...wheels.sources import installed_release_wheels
from ..app import Command, pass_app
from ..base import Application, check_names, waiting
from ..render import authoring as render
from ._shared import check_releases, wheel_option


@click.command(cls=Command)
@click.argument("name")
@click.argument("paths", nargs=-1)
@click.option(
    "--releases", metavar="SPEC", help='PEP 440 specifier for patch.toml (default "==VERSION").'
)
@click.option("--summary", metavar="TEXT", help="One line for patch.toml and `list`.")
@wheel_option
@pass_app
def capture(
    app: Application,
    name: str,
    paths: tuple[str, ...],
    releases: str | None,
    summary: str | None,
    wheel_files: tuple[Path, ...],
) -> None:
    """Turn your edits of the installed vLLM into patch NAME in your patches folder.

    Compares every file vLLM installed (or only PATHS) with what the patches below NAME produce,
    writes NAME/vllm-VERSION/ (diff and manifest) and records NAME as applied.
    """
    from ...authoring.capture import (
        capture as run_capture,  # each command loads only its own machinery
    )

    opts = app.options
    check_names(name)
    check_releases(releases)
    folders = opts.patch_folders("capture")
    target = opts.target()
    wheels = installed_release_wheels(wheel_files, target.version)
    result = run_capture(
        target,
        opts.catalogue(),  # a --patches folder must exist: capture never creates one
        folders,
        name,
        paths,
        releases,
        summary,
        on_wait=waiting(opts, "capture"),
        wheels=wheels,
    )
    app.show(render.capture(result, name, target.command("revert")))
