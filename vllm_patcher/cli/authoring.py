"""capture, import, port, pin: writing patches into a patches folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .. import progress
from ..catalogue.folders import load_catalogue
from ..errors import BadSetting
from ..wheels.sources import installed_release_wheels, wheels_by_release
from .app import Command, pass_app
from .base import Application, check_names, waiting
from .render import authoring as render


def _wheel_option(func: Any) -> Any:
    return click.option(
        "--wheel",
        "wheel_files",
        multiple=True,
        metavar="FILE",
        type=click.Path(path_type=Path),
        help="A vLLM release wheel on disk, read instead of fetching that release (repeatable).",
    )(func)


@click.command(cls=Command)
@click.argument("name")
@click.argument("paths", nargs=-1)
@click.option(
    "--releases", metavar="SPEC", help='PEP 440 specifier for patch.toml (default "==VERSION").'
)
@click.option("--summary", metavar="TEXT", help="One line for patch.toml and `list`.")
@_wheel_option
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
    from ..authoring.capture import (
        capture as run_capture,  # each command loads only its own machinery
    )

    opts = app.options
    check_names(name)
    _check_releases(releases)
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
@_wheel_option
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
    from ..authoring import porting  # three-way merges: port only

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
@_wheel_option
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
    from ..authoring import importing  # diff fitting: import only

    opts = app.options
    check_names(name)
    if bool(diff_file) == resume:
        raise BadSetting("import needs --diff FILE, or --continue after fixing the conflicts")
    _check_releases(releases)
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
    from ..catalogue.folders import patches_args

    # naming the patches it is stacked on too: `apply NAME` alone refuses without them
    names = " ".join([*result.stacked_on, name])
    app.show(render.import_(result, target.command(f"{patches_args(folders)} apply {names}")))


def _check_releases(releases: str | None) -> None:
    if releases is None:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only with --releases

    try:
        SpecifierSet(releases)
    except InvalidSpecifier:
        raise BadSetting(
            f'--releases {releases!r} is not a PEP 440 specifier (e.g. ">=0.11.1")'
        ) from None


@click.command(cls=Command)
@click.argument("versions", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="patches folder to write (default: the built-ins this tool ships).",
)
@_wheel_option
@pass_app
def pin(
    app: Application, versions: tuple[str, ...], out_dir: Path | None, wheel_files: tuple[Path, ...]
) -> None:
    """Maintainer: fetch each release's wheel, run the built-ins' codemods, write their diffs.

    With --wheel FILE the release is read from that wheel (no VERSION needed, no network).
    """
    # the codemods (libcst): pin only
    from ..authoring.pin import pin_release
    from ..catalogue.folders import builtin_root

    if not versions and not wheel_files:
        raise BadSetting("pin needs VERSIONS (releases to pin) or --wheel FILE (repeatable)")
    wheels = wheels_by_release(wheel_files)
    root = out_dir or builtin_root()
    catalogue = load_catalogue()
    fetching = None if app.options.as_json else progress.Progress.for_stderr(False, prefix="pin")
    releases = list(dict.fromkeys([*versions, *wheels]))
    results = [pin_release(v, catalogue, root, progress=fetching, wheels=wheels) for v in releases]
    app.show(render.pin(results, root))
