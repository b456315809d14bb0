"""``import``: a patch started from an upstream diff, fitted to the installed release."""

from __future__ import annotations

from pathlib import Path

import click

from ...errors import BadSetting
from ...wheels.sources import installed_release_wheels
from ..app import Command, pass_app
from ..base import Application, check_names
from ..render import authoring as render
from ._shared import check_releases, wheel_option


@click.command("import", cls=Command)
@click.argument("name")
@click.option(
    "--diff",
    "diff_file",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A unified diff with a/vllm/... paths (a PR's .diff, a git diff).",
)
@click.option(
    "--continue", "resume", is_flag=True, help="Finish after fixing the conflict-marked files."
)
@click.option(
    "--releases", metavar="SPEC", help='PEP 440 specifier for patch.toml (default "==VERSION").'
)
@click.option("--summary", metavar="TEXT", help="One line for patch.toml and `list`.")
@wheel_option
@pass_app
def import_(
    app: Application,
    name: str,
    diff_file: Path | None,
    resume: bool,
    releases: str | None,
    summary: str | None,
    wheel_files: tuple[Path, ...],
) -> None:
    """Start patch NAME from an upstream diff, fitted to the installed release's pristine files.

    Writes NAME/vllm-VERSION/ into your patches folder (never into vLLM: `apply` does that).
    Hunks that do not fit leave a .rej and a conflict-marked copy for `--continue`.
    """
    from ...authoring import importing  # diff fitting: import only

    opts = app.options
    check_names(name)
    if bool(diff_file) == resume:
        raise BadSetting("import needs --diff FILE, or --continue after fixing the conflicts")
    check_releases(releases)
    folders = opts.patch_folders("import")
    target = opts.target()
    wheels = installed_release_wheels(wheel_files, target.version)
    catalogue = opts.catalogue()  # a --patches folder must exist: import never creates one
    if resume:
        result = importing.continue_import(target, catalogue, folders, name, wheels)
    else:
        assert diff_file is not None
        try:
            text = diff_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadSetting(f"cannot read {diff_file}: {exc}") from None
        result = importing.import_diff(
            target,
            catalogue,
            folders,
            name,
            text,
            diff_file.name,
            releases,
            summary,
            wheels=wheels,
        )
    from ...catalogue.folders import patches_args

    # naming the patches it is stacked on too: `apply NAME` alone refuses without them
    names = " ".join([*result.stacked_on, name])
    app.show(render.import_(result, target.command(f"{patches_args(folders)} apply {names}")))
