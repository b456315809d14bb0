"""``pin`` (maintainer): each release's wheel fetched, the built-ins' codemods run, their diffs written."""

from __future__ import annotations

from pathlib import Path

import click

from ... import progress
from ...errors import BadSetting
from ...wheels.sources import wheels_by_release
from ..app import Command, pass_app
from ..base import Application
from ..render import authoring as render
from ..render.events import fetch_line
from ._shared import wheel_option


@click.command(cls=Command)
@click.argument("versions", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="patches folder to write (default: the built-ins this tool ships).",
)
@wheel_option
@pass_app
def pin(
    app: Application, versions: tuple[str, ...], out_dir: Path | None, wheel_files: tuple[Path, ...]
) -> None:
    """Maintainer: fetch each release's wheel, run the built-ins' codemods, write their diffs.

    With --wheel FILE the release is read from that wheel (no VERSION needed, no network).
    """
    # the codemods (libcst): pin only
    from ...authoring.pin import pin_release
    from ...catalogue.folders import builtin_root

    if not versions and not wheel_files:
        raise BadSetting("pin needs VERSIONS (releases to pin) or --wheel FILE (repeatable)")
    wheels = wheels_by_release(wheel_files)
    root = out_dir or builtin_root()
    catalogue = app.options.builtins()
    lines = None if app.options.as_json else progress.Progress.for_stderr(False, prefix="pin")
    fetching = None if lines is None else (lambda note: lines(fetch_line(note)))
    releases = list(dict.fromkeys([*versions, *wheels]))
    results = [pin_release(v, catalogue, root, say=fetching, wheels=wheels) for v in releases]
    app.show(render.pin(results, root))
