"""Command line: parse options, call one function, render its result as text or JSON."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from . import catalog, fileops, progress
from . import status as status_mod
from . import target as target_mod
from .errors import (
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    BadSetting,
    FileSystemError,
    PatcherError,
    PortConflict,
    ServeRefused,
)
from .patchset import Catalogue, load_catalogue, user_folders


@dataclass
class Options:
    python: str | None
    directory: str | None
    as_json: bool
    patch_dirs: tuple[Path, ...] = ()

    def target(self) -> target_mod.Target:
        return target_mod.locate(self.python, self.directory)

    def catalogue(self, names: tuple[str, ...] = ()) -> Catalogue:
        """The built-ins plus the user's folders; ``names`` (or pyproject's select) narrows it."""
        folders, select = user_folders(self.patch_dirs)
        return load_catalogue(folders, names or tuple(select))

    def patch_folders(self, command: str) -> list[Path]:
        """The user's patches folders in the order given (NAME goes into the last, or the one
        holding it); none is a usage error for the commands that write a patch."""
        folders, _ = user_folders(self.patch_dirs)
        if not folders:
            raise BadSetting(
                f"{command} writes into your patches folder: give one with --patches DIR "
                "(or VLLM_PATCHER_PATCHES, or [tool.vllm-patcher] patches in pyproject.toml)"
            )
        return folders


def _check_names(*names: str) -> None:
    """A NAME argument must be a patch name the loader takes (a usage error otherwise)."""
    from .patchset import NAME_RULE, valid_patch_name

    for name in names:
        if not valid_patch_name(name):
            raise BadSetting(f"{name!r} is not a patch name; {NAME_RULE}")


def _echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print, and survive a reader that went away (``| head``): once a change is committed, a
    closed pipe must not turn its exit code into a failure."""
    try:
        click.echo(message, err=err, nl=nl)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2 if err else 1)
        os.close(devnull)


SCHEMA = "vllm-patcher/1"  # the envelope's version; vllm_patcher/schema/output.schema.json


def _command_name(ctx: click.Context | None) -> str | None:
    """``status``, ``cluster status``: the command's path below the program name (a group's
    default command, ``payoff URL``, has no name of its own)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(n for n in reversed(names) if n) or None


def _emit(command: str | None, exit_code: int, data: dict[str, Any]) -> None:
    """Print one ``--json`` answer: the envelope, then the command's own keys at the top level.

    Every ``--json`` output goes through here, reports and errors alike; ``ok`` is exit code 0.
    """
    envelope: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "ok": exit_code == 0,
        "exit_code": exit_code,
    }
    _echo(
        json.dumps({**envelope, **{k: v for k, v in data.items() if k not in envelope}}, indent=2)
    )


def _report(exit_code: int, data: dict[str, Any]) -> None:
    """The current command's ``--json`` report, under the envelope."""
    _emit(_command_name(click.get_current_context(silent=True)), exit_code, data)


def _json_wanted(opts: Options | None) -> bool:
    """``--json`` given anywhere, even when the failure came before the options were merged."""
    if opts is not None and opts.as_json:
        return True
    argv = _RUN.argv[: _RUN.argv.index("--")] if "--" in _RUN.argv else _RUN.argv
    return "--json" in argv


class _RUN:
    """This run's arguments (set by ``_Group.main``) and the command being parsed or run."""

    argv: list[str] = []
    command: str | None = None


def _fail(opts: Options | None, exc: PatcherError) -> NoReturn:
    if _json_wanted(opts):
        _emit(_RUN.command, exc.exit_code, {"error": exc.message})
    _echo(f"vllm-patcher: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


def _usage_error(exc: click.ClickException) -> None:
    """Under ``--json`` a usage error is the envelope on stdout and one error line on stderr, as
    for every other refusal (not click's usage block); without it, click reports it as usual."""
    if _json_wanted(None):
        _emit(_RUN.command, exc.exit_code, {"error": exc.format_message()})
        _echo(f"vllm-patcher: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)


def _named(parent: click.Context | None, info_name: str | None) -> None:
    """Remember the (sub)command about to be parsed, for an error before it runs."""
    _RUN.command = " ".join(filter(None, [_command_name(parent), info_name])) or None


_GLOBAL_KEYS = ("g_python", "g_directory", "g_json", "g_patches")


def _global_params() -> list[click.Parameter]:
    """The top-level options, accepted again after any subcommand (``status --json``)."""
    return [
        click.Option(
            ["--python", "g_python"],
            metavar="PATH",
            multiple=True,
            help="Interpreter or venv directory of the environment to patch.",
        ),
        click.Option(
            ["--target", "g_directory"],
            metavar="DIR",
            multiple=True,
            help="site-packages directory to patch (no interpreter).",
        ),
        click.Option(["--json", "g_json"], is_flag=True, help="Print machine-readable JSON."),
        click.Option(
            ["--patches", "g_patches"],
            metavar="DIR",
            multiple=True,
            type=click.Path(path_type=Path),
            help="A folder of your own patches (repeatable).",
        ),
    ]


def _normal(flag: str, value: str | Path) -> str:
    """The path a value names, so ``V``, ``V/`` and (for ``--python``) ``V/bin/python`` compare
    equal. Symlinks are not followed: every venv's ``bin/python`` links to the same base."""
    path = os.path.abspath(os.path.expanduser(value))
    if flag == "--python" and os.path.isdir(path):
        path = os.path.join(path, "bin", "python")
    return path


def _one(flag: str, values: tuple[Any, ...] | list[Any]) -> Any:
    """One value for an option that may be given more than once: the same path each time, or a
    usage error naming both (never the last one silently)."""
    if not values:
        return None
    first = values[0]
    for other in values[1:]:
        if _normal(flag, other) != _normal(flag, first):
            raise BadSetting(f"{flag} given twice with different values ({first}, {other})")
    return first


def _merge_globals(ctx: click.Context) -> None:
    """Fold the global options given after a (sub)command into the ``Options`` of the run.

    The same option in both places must agree: different values are a usage error, never a guess.
    """
    given = {key: ctx.params.pop(key, None) for key in _GLOBAL_KEYS}
    opts = ctx.find_object(Options)
    if opts is None:  # pragma: no cover - main always sets it
        return
    if given["g_json"]:
        opts.as_json = True
    for attr, flag in (("python", "--python"), ("directory", "--target")):
        values = [v for v in (getattr(opts, attr), *(given[f"g_{attr}"] or ())) if v is not None]
        setattr(opts, attr, _one(flag, values))
    patches = tuple(given["g_patches"] or ())
    if patches:
        if opts.patch_dirs and [os.path.abspath(p) for p in opts.patch_dirs] != [
            os.path.abspath(p) for p in patches
        ]:
            raise BadSetting(
                "--patches given before and after the command with different folders; "
                "give them in one place"
            )
        opts.patch_dirs = patches
    if opts.python and opts.directory:
        raise BadSetting("--python and --target are exclusive; pass one")


class _Command(click.Command):
    """A subcommand that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params())

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        _named(parent, info_name)
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        _merge_globals(ctx)
        return super().invoke(ctx)


class _SubGroup(click.Group):
    """A group of subcommands (``cluster``): takes the global options too, and so do its commands."""

    command_class = _Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params())

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        _named(parent, info_name)
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        _merge_globals(ctx)
        return super().invoke(ctx)


class _Group(click.Group):
    """Turn anticipated failures into one line and a documented exit code, never a traceback."""

    command_class = _Command
    group_class = _SubGroup

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        _RUN.argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        _RUN.command = None
        return super().main(args, *rest, **kwargs)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.ClickException as exc:  # an unknown option before the command
            _RUN.command = _RUN.command or self._command_in_argv()
            _usage_error(exc)
            raise

    def _command_in_argv(self) -> str | None:
        """The (sub)command the arguments name, for an error click raised before reaching it."""
        names: list[str] = []
        group: click.Group | None = self
        for arg in _RUN.argv:
            if arg == "--":
                break
            found = group.commands.get(arg) if group is not None else None
            if found is None:
                continue
            names.append(arg)
            group = found if isinstance(found, click.Group) else None
            if group is None:
                break
        return " ".join(names) or None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PatcherError as exc:
            _fail(ctx.find_object(Options), exc)
        except click.ClickException as exc:
            _usage_error(exc)
            raise
        except KeyboardInterrupt:
            message = "interrupted; every file is as it was before this run"
            if _json_wanted(ctx.find_object(Options)):
                _emit(_RUN.command, EXIT_INTERRUPTED, {"error": message})
            _echo(f"vllm-patcher: error: {message}", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            sys.exit(0)  # only reached outside _echo; nothing was being written
        except OSError as exc:
            _fail(ctx.find_object(Options), FileSystemError(fileops.os_error_message(None, exc)))


def _waiting(opts: Options, command: str) -> progress.Progress | None:
    """What a run waiting for another's lock says, once: a line on stderr, none under --json."""
    return None if opts.as_json else progress.Progress.for_stderr(False, prefix=command)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--python",
    "python",
    metavar="PATH",
    multiple=True,
    help="Interpreter or venv directory of the environment to patch "
    "(default: this interpreter if it has vLLM, else the active VIRTUAL_ENV).",
)
@click.option(
    "--target",
    "directory",
    metavar="DIR",
    multiple=True,
    help="site-packages directory to patch (no interpreter).",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--patches",
    "patch_dirs",
    metavar="DIR",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A folder of your own patches (repeatable; else VLLM_PATCHER_PATCHES or pyproject.toml).",
)
@click.version_option(package_name="vllm-patcher")
@click.pass_context
def main(
    ctx: click.Context,
    python: tuple[str, ...],
    directory: tuple[str, ...],
    as_json: bool,
    patch_dirs: tuple[Path, ...],
) -> None:
    """Apply, verify and revert source patches to an installed vLLM: the built-in EAGLE-3 changes
    for DeepSeek-V3, Kimi and MiniMax-M2 targets, and patches of your own.

    The options above may also follow the command (`vllm-patcher status --json`)."""
    _RUN.command = ctx.invoked_subcommand  # for an error before the command parses its options
    ctx.obj = Options(_one("--python", python), _one("--target", directory), as_json, patch_dirs)
    if ctx.obj.python and ctx.obj.directory:
        raise BadSetting("--python and --target are exclusive; pass one")
    from .journal import lock_timeout

    lock_timeout()  # a bad VLLM_PATCHER_LOCK_TIMEOUT is a usage error for every command


_CHOSEN_TEXT = {target_mod.CHOSEN_VENV: "from VIRTUAL_ENV"}


def _chosen_line(target: target_mod.Target) -> str:
    where = target.python if target.python is not None else target.site_packages
    why = _CHOSEN_TEXT.get(target.chosen_by, target.chosen_by)
    return f"target: {where}" + (f" ({why})" if why else "")


def _status_lines(st: status_mod.Status, target: target_mod.Target | None = None) -> list[str]:
    lines = [
        f"vLLM {st.vllm_version} ({st.distribution}) at {st.location}"
        + f" ({st.shape} install, judged against {st.reference})",
        *([_chosen_line(target)] if target is not None else []),
        f"release: {st.release}   fingerprint: {st.fingerprint}",
    ]
    if st.in_progress:
        lines.append(
            "another vllm-patcher run is changing this environment right now; "
            "run status again when it is done"
        )
    elif st.interrupted:
        lines.append(
            f"an earlier {st.interrupted} run was interrupted; run apply or revert to recover"
        )
    for p in st.patches:
        method = p.method or "-"
        files = ", ".join(p.files) if p.files else "-"
        origin = "" if p.origin == "built-in" else f"   [{p.origin}]"
        lines.append(f"  {p.name:<22} {p.state.value:<15} {method:<12} {files}{origin}")
        if p.detail and p.state not in (
            status_mod.PatchState.APPLIED,
            status_mod.PatchState.UPSTREAM,
        ):
            lines.append(f"      {p.detail}")
    return lines


@main.command()
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 unless every patch is applied, upstream or not-applicable (a CI gate).",
)
@click.pass_obj
def status(opts: Options, check: bool) -> None:
    """Show the vLLM release and the state of every patch (never waits for a running apply).

    With --check, exit 1 when any patch is pending, outdated, drifted, unrecorded or unported, or
    another run is changing the environment right now.
    """
    target = opts.target()
    st = status_mod.read_status(target, opts.catalogue())
    code = EXIT_CHECK_FAILED if check and not st.ready else 0
    if opts.as_json:
        _report(
            code,
            {
                **st.to_dict(),
                "chosen_by": target.chosen_by,
                "python": str(target.python) if target.python is not None else None,
            },
        )
    else:
        _echo("\n".join(_status_lines(st, target)))
    if code:
        sys.exit(code)


@main.command()
@click.option("--dry-run", is_flag=True, help="Print the unified diff and write nothing.")
@click.option(
    "--strict", is_flag=True, help="Refuse unless a pinned diff matches this release exactly."
)
@click.argument("names", nargs=-1)
@click.pass_obj
def apply(opts: Options, dry_run: bool, strict: bool, names: tuple[str, ...]) -> None:
    """Apply every pending patch (or only NAMES), all files or none."""
    from . import txn

    _check_names(*names)
    target = opts.target()
    catalogue = opts.catalogue(names)
    if not (opts.as_json or dry_run):  # a dry run's stdout is the diff, and it changes nothing
        _echo(_chosen_line(target))
    result = txn.apply(
        target, catalogue, dry_run=dry_run, strict=strict, on_wait=_waiting(opts, "apply")
    )
    st = result.status
    assert st is not None
    methods = result.methods
    if opts.as_json:
        _report(0, result.to_dict())
        return
    if dry_run:
        if result.diff:
            _echo(result.diff, nl=False)
        elif result.edits:
            _echo(f"would adopt {', '.join(result.adopted)} (already patched by hand)", err=True)
        else:
            _echo("nothing to apply", err=True)
        for note in result.notes:
            _echo(f"note: {note}", err=True)
        return
    for rel in result.recovered:
        _echo(f"recovered {rel} from an interrupted run")
    for note in result.notes:
        _echo(f"note: {note}")
    _echo(f"vLLM {st.vllm_version} at {st.location}")
    for p in st.patches:
        if p.name in methods:
            how = methods[p.name]
            verb = (
                "adopted (already patched by hand; now recorded)"
                if how == "adopted"
                else "applied now"
            )
            how = "pinned-diff" if how == "adopted" else how
        else:
            verb, how = p.state.value, p.method or ""
        _echo(f"  {p.name:<22} {verb}" + (f" ({how})" if how else ""))
    if not result.edits:
        _echo("nothing to do")


# verify's progress names what runs: the probe runs both tiers in one interpreter.
_TIER_STEPS = {"import": "import and behaviour tiers"}


@main.command()
@click.pass_obj
def verify(opts: Options) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter.

    Stops after the state tier when a patch is not applied, and names the command that fixes it.
    """
    from .verify import TIERS
    from .verify import verify as run_verify

    target = opts.target()
    catalogue = opts.catalogue()
    if not opts.as_json:
        _echo(_chosen_line(target))
    steps = progress.Progress.for_stderr(opts.as_json, prefix="verify")

    def on_tier(tier: str) -> None:
        steps.step(_TIER_STEPS.get(tier, f"{tier} tier"))

    with steps:
        report = run_verify(target, catalogue, on_tier=on_tier)
    if opts.as_json:
        _report(0 if report.ok else EXIT_CHECK_FAILED, report.to_dict())
    else:
        _echo(f"vLLM {report.vllm_version} at {report.location}")
        for tier in TIERS:
            result = report.tiers.get(tier, "not-run")
            checks = [c for c in report.checks if c.tier == tier]
            skipped = sum(c.skipped for c in checks)
            ran = len(checks) - skipped
            passed = sum(c.ok and not c.skipped for c in checks)
            counts = f" ({passed}/{ran})" if ran else ""
            if skipped:
                counts = f"{counts} ({skipped} not applicable)"
            why = f" ({report.not_run[tier]})" if tier in report.not_run else ""
            _echo(f"  {tier:<10} {result}{counts}{why}")
            for c in checks:
                if not c.ok:
                    _echo(f"      FAIL {c.name}: {c.detail}")
                elif c.skipped:
                    _echo(f"      n/a  {c.name}: {c.detail}")
        if report.ok:
            _echo("verify: OK")
        elif report.tiers.get("import") == "not-run" and report.tiers.get("state") == "failed":
            then = f"run `{report.fix}` first" if report.fix else "fix what the state tier names"
            _echo(f"verify: FAILED: stopped after the state tier; {then}, then verify again")
        else:
            _echo("verify: FAILED")
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@main.command()
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@click.pass_obj
def revert(opts: Options, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    from . import txn

    target = opts.target()
    result = txn.revert(target, force=force, on_wait=_waiting(opts, "revert"))
    if opts.as_json:
        _report(
            0,
            {
                "vllm_version": target.version,
                "location": str(target.site_packages),
                **result.to_dict(),
            },
        )
        return
    if not (result.restored or result.already_pristine or result.recovered):
        _echo("nothing applied; nothing to revert")
        return
    for rel in result.recovered:
        _echo(f"restored {rel} (an interrupted run had left it patched)")
    for rel in result.restored:
        _echo(f"restored {rel}")
    for rel, where in result.saved_edits.items():
        _echo(f"your edited {rel} was kept at {where}")
    for rel in result.already_pristine:
        _echo(f"{rel} was already pristine")
    _echo(_left_in_place(target.site_packages))


def _left_in_place(root: Path) -> str:
    """What revert leaves in the state folder, read from the folder (saved copies of your edits
    may be there from any earlier ``revert --force``), and whether removing it loses anything."""
    from .journal import state_dir

    folder = state_dir(root)
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError:
        names = []
    if "saved" in names and any((folder / "saved").iterdir()):
        return (
            f"left in place: {folder} (the lock file, and in saved/ the copies of your edits that "
            "revert --force kept); move them out, then remove it with rm -r once no vllm-patcher "
            "run is active"
        )
    return (
        f"left in place: {folder} (only the lock file now); remove it with rm -r once no "
        "vllm-patcher run is active"
    )


def _wheel_option(func: Any) -> Any:
    return click.option(
        "--wheel",
        "wheel_files",
        multiple=True,
        metavar="FILE",
        type=click.Path(path_type=Path),
        help="A vLLM release wheel on disk, read instead of fetching that release (repeatable).",
    )(func)


def _wheels(files: tuple[Path, ...]) -> dict[str, Path]:
    """``--wheel FILE...`` by the release each holds (its METADATA), every one checked up front."""
    if not files:
        return {}
    from .fetch import local_wheel

    found: dict[str, Path] = {}
    for path in files:
        version = local_wheel(path).version
        if version in found and found[version].resolve() != path.resolve():
            raise BadSetting(f"two --wheel files for vLLM {version}: {found[version]} and {path}")
        found[version] = path
    return found


def _installed_release_wheels(
    files: tuple[Path, ...], target: target_mod.Target
) -> dict[str, Path]:
    """capture and import read the installed release only: a wheel of another one is a mistake."""
    wheels = _wheels(files)
    release = target.version.split("+", 1)[0]
    for version, path in wheels.items():
        if version != release:
            raise BadSetting(
                f"--wheel {path} holds vLLM {version}, but the installed release is {release}"
            )
    return wheels


@main.command()
@click.argument("name")
@click.argument("paths", nargs=-1)
@click.option(
    "--releases", metavar="SPEC", help='PEP 440 specifier for patch.toml (default "==VERSION").'
)
@click.option("--summary", metavar="TEXT", help="One line for patch.toml and `list`.")
@_wheel_option
@click.pass_obj
def capture(
    opts: Options,
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
    from .capture import capture as run_capture

    _check_names(name)
    _check_releases(releases)
    folders = opts.patch_folders("capture")
    target = opts.target()
    wheels = _installed_release_wheels(wheel_files, target)
    result = run_capture(
        target,
        opts.catalogue(),  # a --patches folder must exist: capture never creates one
        folders,
        name,
        paths,
        releases,
        summary,
        on_wait=_waiting(opts, "capture"),
        wheels=wheels,
    )
    if opts.as_json:
        _report(0, result.to_dict())
        return
    verb = "replaced" if result.replaced else "wrote"
    _echo(f"{verb} {result.folder / ('vllm-' + result.version)} ({', '.join(result.files)})")
    _echo(
        f"{name} is recorded as applied on vLLM {result.version}; "
        f"`{target.command('revert')}` takes it out"
    )


@main.command()
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
@click.pass_obj
def port(
    opts: Options,
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
    from . import porting

    _check_names(name)
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
    wheels = _wheels(wheel_files)
    if all_releases:
        targets = porting.all_releases(patch)
    else:
        # a wheel's release is a release to port to, unless NAME is pinned there (its source)
        targets = list(versions) + [
            v for v in wheels if v not in versions and v not in patch.pinned_versions
        ]
        if not targets:
            raise BadSetting(
                f"{name} is already pinned for the release of every --wheel given; name a "
                "release to port to with --to VERSION"
            )
    result = porting.port(catalogue, name, targets, resume=resume, wheels=wheels)
    if opts.as_json:
        _report(0 if result.ok else PortConflict.exit_code, result.to_dict())
    else:
        for r in result.releases:
            extra = f" ({', '.join(r.files)})" if r.files else ""
            where = f" -> {r.folder}" if r.folder else ""
            _echo(f"  vllm {r.version:<10} {r.outcome}{extra}{where}")
        for note in result.notes:
            _echo(f"note: {note}")
        if result.having(porting.CONFLICT):
            _echo(
                f"resolve the markers in {patch.folder / porting.CONFLICTS}, then run "
                f"`vllm-patcher {patch.args(f'port {name} --to VERSION --continue')}`"
            )
    # --continue with markers left is a refusal for those releases (the others were written)
    refusal = porting.markers_left(patch, result)
    if refusal:
        _echo(f"vllm-patcher: error: {refusal}", err=True)
    if not result.ok:
        sys.exit(PortConflict.exit_code)


@main.command("import")
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
@click.pass_obj
def import_(
    opts: Options,
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
    from . import importing

    _check_names(name)
    if bool(diff_file) == resume:
        raise BadSetting("import needs --diff FILE, or --continue after fixing the conflicts")
    _check_releases(releases)
    folders = opts.patch_folders("import")
    target = opts.target()
    wheels = _installed_release_wheels(wheel_files, target)
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
    if opts.as_json:
        _report(0 if result.written else PortConflict.exit_code, result.to_dict())
    else:
        for rel, how in result.files.items():
            _echo(f"  {rel:<50} {how}")
        for rel in result.dropped:
            _echo(f"  {rel:<50} dropped (outside vllm/)")
        for note in result.notes:
            _echo(f"note: {note}")
        if result.written:
            from .capture import patches_args

            # naming the patches it is stacked on too: `apply NAME` alone refuses without them
            names = " ".join([*result.stacked_on, name])
            apply = target.command(f"{patches_args(folders)} apply {names}")
            _echo(
                f"wrote {result.folder / ('vllm-' + result.version)}; `{apply}` patches vLLM with it"
            )
    if not result.written:
        sys.exit(PortConflict.exit_code)


def _check_releases(releases: str | None) -> None:
    if releases is None:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(releases)
    except InvalidSpecifier:
        raise BadSetting(
            f'--releases {releases!r} is not a PEP 440 specifier (e.g. ">=0.11.1")'
        ) from None


@main.command("list")
@click.pass_obj
def list_(opts: Options) -> None:
    """The catalogue: every patch, where it comes from, and which releases it has diffs for."""
    from .patchset import Verdict, layout, pinned_versions

    catalogue = opts.catalogue()
    # The catalogue needs no vLLM; an environment named anyway must exist, and its row is marked.
    installed = opts.target() if (opts.python or opts.directory) else None
    versions = pinned_versions(catalogue)
    rows: list[dict[str, Any]] = []
    for version in versions:
        lay = layout(catalogue, version, {})
        cells = {}
        for p in catalogue.patches:
            verdict = lay.verdicts[p.name]
            # what apply does there: a diff outside releases (or upstream) is not used
            if verdict is Verdict.UPSTREAM:
                cells[p.name] = "upstream"
            elif verdict is Verdict.OUTSIDE:
                cells[p.name] = "not-applicable"
            elif p.pin(version) is not None:
                cells[p.name] = "pinned-diff"
            elif p.transforms:  # a release the codemods were pinned for, without this change
                pinned_here = any(q.pin(version) for q in catalogue.patches if q.transforms)
                cells[p.name] = "not-applicable" if pinned_here else "transform"
            else:
                cells[p.name] = "unported"
        rows.append({"version": version, "pinned": True, "patches": cells})
    patches = [
        {
            "name": p.name,
            "origin": p.origin,
            "summary": p.summary,
            "releases": str(p.releases),
            "fixed_in": str(p.fixed_in) if p.fixed_in else None,
            "pinned_versions": list(p.pinned_versions),
            "files": p.all_paths(),
        }
        for p in catalogue.patches
    ]
    if opts.as_json:
        data: dict[str, Any] = {
            "patches": patches,
            "releases": rows,
            "supported": catalog.SUPPORTED_RANGE,
        }
        if installed is not None:
            data["installed"] = {
                "vllm_version": installed.version,
                "site_packages": str(installed.site_packages),
            }
        _report(0, data)
        return
    for p in catalogue.patches:
        fixed = f", upstream from {p.fixed_in}" if p.fixed_in else ""
        _echo(f"{p.name:<22} {p.summary}")
        _echo(f"{'':<22} releases {p.releases or 'any'}{fixed}; from {p.origin}")
    _echo("")
    names = catalogue.names
    _echo(f"{'release':<10}" + "".join(f"{n[:22]:<24}" for n in names))
    for row in rows:
        mark = "*" if installed is not None and row["version"] == installed.version else ""
        release = f"{row['version']}{mark}"
        _echo(f"{release:<10}" + "".join(f"{row['patches'][n]:<24}" for n in names))
    if installed is not None:
        _echo(f"* installed at {installed.site_packages} ({_chosen_line(installed)})")
    _echo(f"{'<0.11.0':<10}refused (no EAGLE-3 allow-list to widen)")
    _echo("other releases in range: libcst transform for the built-ins (apply --strict refuses)")


@main.command()
@click.argument("versions", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="patches folder to write (default: the built-ins this tool ships).",
)
@_wheel_option
@click.pass_obj
def pin(
    opts: Options, versions: tuple[str, ...], out_dir: Path | None, wheel_files: tuple[Path, ...]
) -> None:
    """Maintainer: fetch each release's wheel, run the built-ins' codemods, write their diffs.

    With --wheel FILE the release is read from that wheel (no VERSION needed, no network).
    """
    from .patchset import builtin_root
    from .pin_generator import pin_release

    if not versions and not wheel_files:
        raise BadSetting("pin needs VERSIONS (releases to pin) or --wheel FILE (repeatable)")
    wheels = _wheels(wheel_files)
    root = out_dir or builtin_root()
    catalogue = load_catalogue()
    fetching = None if opts.as_json else progress.Progress.for_stderr(False, prefix="pin")
    releases = list(dict.fromkeys([*versions, *wheels]))
    results = [pin_release(v, catalogue, root, progress=fetching, wheels=wheels) for v in releases]
    if opts.as_json:
        _report(0, {"patches_dir": str(root), "releases": [r.__dict__ for r in results]})
        return
    for r in results:
        _echo(f"vllm {r.version}: {r.outcome}" + (f" ({', '.join(r.files)})" if r.files else ""))


_VLLM_VERSION_OPTION = click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    default=None,
    help="Judge for this vLLM release instead of the installed one (no vLLM needed).",
)
_MODEL_HELP = "Target model: a directory, or a Hugging Face repo id found in the local cache."
_DRAFTER_HELP = "EAGLE-3 drafter: a directory, or a Hugging Face repo id found in the local cache."


def _doctor_release(opts: Options, vllm_version: str | None) -> str:
    """The release doctor judges for: --vllm-version, else the installed vLLM's."""
    if vllm_version is not None:
        return vllm_version
    from .errors import TargetNotFound

    try:
        return opts.target().version
    except TargetNotFound as exc:
        raise TargetNotFound(f"{exc.message}; or name the release with --vllm-version") from None


def _hub_python(opts: Options) -> Callable[[], str]:
    """The interpreter whose huggingface_hub looks repo ids up in the local cache: --python's,
    else the vLLM install's (the one ``vllm serve`` runs in), else this one. Asked only when an
    argument is a repo id."""

    def pick() -> str:
        from .errors import TargetNotFound

        if opts.python is not None:
            return target_mod.interpreter(opts.python)
        if opts.directory is None:
            try:
                found = opts.target().python
            except TargetNotFound:
                found = None
            if found is not None:
                return str(found)
        return sys.executable

    return pick


def _doctor_lines(report: Any, fix: bool) -> list[str]:
    from . import doctor as doctor_mod

    lines: list[str] = []
    if report.fix is not None:
        lines.append(f"--fix wrote to {report.fix.config} (original kept as {report.fix.backup}):")
        lines.extend(f"  {value.describe()}" for value in report.fix.values)
        lines.append("checked again:")
    elif fix:
        lines.append("--fix: nothing it can write; see the fixes below")
    t, d, aux = report.target, report.drafter, report.aux
    if t is not None and d is not None and aux is not None:
        lines.append(
            f"vLLM {report.vllm_version}, target {_model_name(report.model_source, t.path)} "
            f"({t.model_type}, {t.num_layers} layers), drafter {_model_name(report.drafter_source, d.path)}"
        )
        lines.append(
            f"aux layers: vLLM {list(aux.vllm_ids)} (residual entering layer i) = SGLang/SpecForge "
            f"{list(aux.output_ids)} (output of layer i), from {aux.source}"
        )
    else:
        lines.append(f"vLLM {report.vllm_version}")
    for f in report.findings:
        lines.append(f"  {f.level:<8} {f.check:<13} {f.message}")
        if f.fix and f.level != doctor_mod.OK:
            lines.append(f"  {'':<8} {'':<13} fix: {f.fix}")
    problems, warnings = len(report.problems), len(report.warnings)
    lines.append(
        f"doctor: {problems} problem{'s' * (problems != 1)}, "
        f"{warnings} warning{'s' * (warnings != 1)}"
    )
    return lines


def _model_name(source: Any, path: str) -> str:
    """A repo id as the user gave it, with the snapshot folder it was read from."""
    if source is not None and source.repo_id:
        return f"{source.repo_id} ({path})"
    return path


@main.command()
@click.option("--model", "model_dir", required=True, metavar="DIR|REPO", help=_MODEL_HELP)
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR|REPO", help=_DRAFTER_HELP)
@_VLLM_VERSION_OPTION
@click.option(
    "--fix",
    is_flag=True,
    help="Write the top-level aux-layer key the drafter needs (config.json backed up first).",
)
@click.pass_obj
def doctor(
    opts: Options, model_dir: str, drafter_dir: str, vllm_version: str | None, fix: bool
) -> None:
    """Preflight: check the drafter against the target for this vLLM release, before any load."""
    from . import doctor as doctor_mod

    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)  # a usage error before any file is read
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.run(model_dir, drafter_dir, release, fix=fix, python=_hub_python(opts))
    if opts.as_json:
        _report(0 if report.ok else EXIT_CHECK_FAILED, report.to_dict())
    else:
        for line in _doctor_lines(report, fix):
            _echo(line)
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@main.command("serve-args")
@click.option(
    "--model",
    "model_dir",
    required=True,
    metavar="DIR|REPO",
    help=_MODEL_HELP + " Doctor's checks run against it first.",
)
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR|REPO", help=_DRAFTER_HELP)
@_VLLM_VERSION_OPTION
@click.option(
    "--num-speculative-tokens",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Draft tokens proposed per step.",
)
@click.pass_obj
def serve_args(
    opts: Options,
    model_dir: str,
    drafter_dir: str,
    vllm_version: str | None,
    num_speculative_tokens: int,
) -> None:
    """Run doctor's checks, then print the JSON for vllm serve --speculative-config.

    stdout is that one line and nothing else, with or without --json (it is vLLM's input, not a
    report); a problem refuses with exit 1, the problems on stderr.
    """
    from . import doctor as doctor_mod

    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.check(model_dir, drafter_dir, release, python=_hub_python(opts))
    if not report.ok:
        for f in report.problems:
            _echo(f"vllm-patcher: problem: {f.check}: {f.message}", err=True)
            if f.fix:
                _echo(f"vllm-patcher:   fix: {f.fix}", err=True)
        raise ServeRefused(
            f"serve-args: doctor found {len(report.problems)} problem"
            f"{'s' * (len(report.problems) != 1)} (above); nothing printed for "
            f"--speculative-config (vllm-patcher doctor --model {model_dir} --drafter "
            f"{drafter_dir}{f' --vllm-version {vllm_version}' if vllm_version else ''} shows the "
            "whole report)"
        )
    assert report.drafter_source is not None
    _echo(json.dumps(doctor_mod.speculative_config(report.drafter_source, num_speculative_tokens)))


@main.group()
def cluster() -> None:
    """Status, apply or verify on every node of a running Ray cluster, through Ray."""


def _cluster_options(func: Any) -> Any:
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        default=600.0,
        show_default=True,
        help="Seconds to wait for every node's answer.",
    )(func)
    return click.option(
        "--address",
        default="auto",
        show_default=True,
        metavar="ADDR",
        help="Ray cluster address, as for ray.init (HOST:PORT of the head node, or auto).",
    )(func)


def _run_cluster(
    opts: Options, command: str, address: str, timeout: float, strict: bool = False
) -> None:
    from . import cluster as cluster_mod

    if opts.directory:
        raise click.UsageError(
            "cluster works through an interpreter (--python); for a bare site-packages on a node "
            f"set {cluster_mod.SITE_ENV} in that node's environment"
        )
    catalogue = opts.catalogue()
    python = target_mod.interpreter(opts.python) if opts.python else target_mod.default_python()
    report = cluster_mod.run(
        command,
        python,
        address,
        timeout=timeout,
        strict=strict,
        user_dirs=catalogue.user_folders(),
    )
    if opts.as_json:
        _report(report.exit_code, report.to_dict())
        if report.exit_code:
            sys.exit(report.exit_code)
        return
    code = "/".join(sorted({n.code for n in report.nodes if n.code})) or "-"
    _echo(
        f"Ray {report.ray_version} cluster at {report.address}: "
        f"{len(report.nodes)} node(s), tool code {code}"
    )
    names = catalogue.names
    _echo(
        f"  {'node':<18} {'ip':<15} {'vLLM':<8} {'fingerprint':<40} "
        + "".join(f"{n:<22}" for n in names)
        + "result"
    )
    for n in report.nodes:
        if n.outcome != cluster_mod.ANSWERED:
            result = f"{n.outcome.upper()}: {n.error}"
        elif command == "apply":
            result = f"applied {len(n.changed)} file(s)" if n.changed else "nothing to do"
        elif command == "verify":
            skipped = [t for t, r in n.verify_tiers.items() if r == "skipped"]
            result = "verify OK" if n.verify_ok else "verify FAILED"
            result += f" ({', '.join(skipped)} skipped)" if skipped else ""
        else:
            result = "NOT OK" if n.problems else "ok"
        _echo(
            f"  {n.label:<18} {n.ip:<15} {n.vllm_version or '-':<8} {n.fingerprint or '-':<40} "
            + "".join(f"{n.patches.get(p, '-'):<22}" for p in names)
            + result
        )
        if n.location:
            _echo(f"      {n.location}")
    for note in report.notes:
        _echo(f"note: {note}")
    if report.ok:
        verified = ", verified on every node" if command == "verify" else ""
        _echo(
            f"verdict: OK: {len(report.nodes)} node(s), one fingerprint, "
            f"no patch pending or drifted{verified}"
        )
    else:
        bad = sum(bool(n.problems) for n in report.nodes)
        _echo(f"verdict: NOT OK ({bad} of {len(report.nodes)} node(s) not ready)")
        for problem in report.problems:
            _echo(f"  {problem}")
    if report.exit_code:
        sys.exit(report.exit_code)


@cluster.command("status")
@_cluster_options
@click.pass_obj
def cluster_status(opts: Options, address: str, timeout: float) -> None:
    """Every node's patch states and fingerprint, and one verdict.

    Exit 0 only when every node answers with the same fingerprint and no patch is pending or
    drifted.
    """
    _run_cluster(opts, "status", address, timeout)


@cluster.command("apply")
@_cluster_options
@click.option(
    "--strict", is_flag=True, help="Refuse on a node unless a pinned diff matches exactly."
)
@click.pass_obj
def cluster_apply(opts: Options, address: str, timeout: float, strict: bool) -> None:
    """Apply on every node: all files or none, per node.

    The table says which nodes were applied, which refused and why, and which were lost.
    """
    _run_cluster(opts, "apply", address, timeout, strict=strict)


@cluster.command("verify")
@_cluster_options
@click.pass_obj
def cluster_verify(opts: Options, address: str, timeout: float) -> None:
    """Verify every node, each in its own interpreter.

    Every tier of verify; the import and behaviour tiers run in the node's own Python.
    """
    _run_cluster(opts, "verify", address, timeout)


__all__ = ["main"]


# --- payoff ----------------------------------------------------------------------------------------


class _DefaultGroup(_SubGroup):
    """``payoff URL`` runs the report; ``payoff bench ...`` the benchmark: a group whose first
    argument, when it names no subcommand, belongs to the default one."""

    default = "report"

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "", self.commands[self.default], args


_PAYOFF_SOURCES = (
    "URL: the server's base URL (its /metrics is read twice, --window apart); or --metrics FILE "
    "[FILE]: saved scrapes (one: since start; two: the window between them); or --log FILE: vLLM's "
    "SpecDecoding log lines."
)


@main.group(
    cls=_DefaultGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    context_settings={"ignore_unknown_options": True},
    help="Does speculative decoding pay? " + _PAYOFF_SOURCES,
)
@click.pass_context
def payoff(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise BadSetting("payoff needs a server URL, --metrics FILE [FILE] or --log FILE")


@payoff.command("report", hidden=True)
@click.argument("sources", nargs=-1)
@click.option(
    "--metrics", "metrics", multiple=True, type=click.Path(path_type=Path), metavar="FILE"
)
@click.option("--log", "log", type=click.Path(path_type=Path), metavar="FILE")
@click.option(
    "--window",
    "window_s",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between the two scrapes of a live server (0: everything since it started).",
)
@click.option(
    "--baseline",
    multiple=True,
    metavar="URL|FILE",
    help="The same model served without speculation under the same load (a URL, or saved "
    "scrapes: repeat for two).",
)
@click.option("--watch", is_flag=True, help="Refresh every window until Ctrl-C.")
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png", help="Draw it.")
@click.pass_obj
def payoff_report(
    opts: Options,
    sources: tuple[str, ...],
    metrics: tuple[Path, ...],
    log: Path | None,
    window_s: float,
    baseline: tuple[str, ...],
    watch: bool,
    plot: Path | None,
) -> None:
    from .payoff import run as payoff_run

    url = None
    if (metrics or log) and any(s.startswith(("http://", "https://")) for s in sources):
        raise BadSetting("give exactly one of URL, --metrics FILE [FILE] or --log FILE")
    if metrics:
        metrics = metrics + tuple(Path(s) for s in sources)
    elif len(sources) > 1:
        raise BadSetting(f"payoff reads one server at a time; got {len(sources)} URLs")
    elif sources:
        url = sources[0]

    def show(shown: Any) -> None:
        if opts.as_json:
            _report(payoff_run.exit_code(shown), shown)
        else:
            for line in shown:
                _echo(line)

    exit_code = payoff_run.report(
        url,
        metrics,
        log,
        window_s,
        baseline,
        watch=watch,
        plot=plot,
        show=show,
        as_json=opts.as_json,
    )
    sys.exit(exit_code)


@payoff.command("bench")
@click.argument("url")
@click.option(
    "--baseline-url", required=True, metavar="URL", help="The same model, no speculation."
)
@click.option(
    "--concurrency", default="1,4,16", show_default=True, help="Comma-separated concurrencies."
)
@click.option("--num-prompts", default=64, show_default=True, type=int)
@click.option("--dataset", default="random", show_default=True, help="vllm bench serve's dataset.")
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png", help="Draw it.")
@click.argument("client_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CLIENT ARGS]")
@click.pass_obj
def payoff_bench(
    opts: Options,
    url: str,
    baseline_url: str,
    concurrency: str,
    num_prompts: int,
    dataset: str,
    plot: Path | None,
    client_args: tuple[str, ...],
) -> None:
    """Run the same load on both servers with vLLM's own benchmark client (`vllm bench serve`, in
    the target interpreter), per concurrency; arguments after `--` go to the client."""
    from .payoff import bench

    try:
        levels = [int(c) for c in concurrency.split(",") if c.strip()]
    except ValueError:
        raise BadSetting(f"--concurrency {concurrency!r}: give integers like 1,4,16") from None
    if plot is not None:
        from .payoff.plot import check_available

        check_available(plot)
    target = opts.target()
    if target.python is None:
        raise BadSetting("payoff bench runs vLLM's benchmark client: give --python, not --target")
    result = bench.run(
        str(target.python), url, baseline_url, levels, num_prompts, dataset, client_args
    )
    if plot is not None:
        from .payoff.plot import draw_bench

        draw_bench(result, plot)
    if opts.as_json:
        _report(0, result.to_dict())
    else:
        for line in bench.lines(result):
            _echo(line)
