"""What the authoring commands share: the --wheel option and the check of a --releases specifier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ...errors import BadSetting


def wheel_option(func: Any) -> Any:
    return click.option(
        "--wheel",
        "wheel_files",
        multiple=True,
        metavar="FILE",
        type=click.Path(path_type=Path),
        help="A vLLM release wheel on disk, read instead of fetching that release (repeatable).",
    )(func)


def check_releases(releases: str | None) -> None:
    if releases is None:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only with --releases

    try:
        SpecifierSet(releases)
    except InvalidSpecifier:
        raise BadSetting(
            f'--releases {releases!r} is not a PEP 440 specifier (e.g. ">=0.11.1")'
        ) from None
