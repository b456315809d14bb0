"""The command line's machinery: the run's options, the global options accepted after any
command, the ``--json`` envelope, and the one place anticipated failures become an error line
and a documented exit code."""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from .. import fileops, progress
from ..catalogue.folders import load_catalogue, user_folders
from ..catalogue.model import NAME_RULE, Catalogue, valid_patch_name
from ..errors import (
    EXIT_INTERRUPTED,
    BadSetting,
    FileSystemError,
    PatcherError,
)
from ..install import locate as locate_mod
from ..install import target as target_mod


@dataclass
class Options:
    python: str | None
    directory: str | None
    as_json: bool
    patch_dirs: tuple[Path, ...] = ()

    def target(self) -> target_mod.Target:
        return locate_mod.locate(self.python, self.directory)

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


def check_names(*names: str) -> None:
    """A NAME argument must be a patch name the loader takes (a usage error otherwise)."""
    for name in names:
        if not valid_patch_name(name):
            raise BadSetting(f"{name!r} is not a patch name; {NAME_RULE}")


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print, and survive a reader that went away (``| head``): once a change is committed, a
    closed pipe must not turn its exit code into a failure."""
    try:
        click.echo(message, err=err, nl=nl)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2 if err else 1)
        os.close(devnull)


SCHEMA = "vllm-patcher/1"  # the envelope's version; vllm_patcher/schema/output.schema.json


def command_name(ctx: click.Context | None) -> str | None:
    """``status``, ``cluster status``: the command's path below the program name (a group's
    default command, ``payoff URL``, has no name of its own)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(n for n in reversed(names) if n) or None


def emit(command: str | None, exit_code: int, data: dict[str, Any]) -> None:
    """Print one ``--json`` answer: the envelope, then the command's own keys at the top level.

    Every ``--json`` output goes through here, reports and errors alike; ``ok`` is exit code 0.
    """
    envelope: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "ok": exit_code == 0,
        "exit_code": exit_code,
    }
    echo(json.dumps({**envelope, **{k: v for k, v in data.items() if k not in envelope}}, indent=2))


def json_report(exit_code: int, data: dict[str, Any]) -> None:
    """The current command's ``--json`` report, under the envelope."""
    emit(command_name(click.get_current_context(silent=True)), exit_code, data)


def json_wanted(opts: Options | None) -> bool:
    """``--json`` given anywhere, even when the failure came before the options were merged."""
    if opts is not None and opts.as_json:
        return True
    argv = RUN.argv[: RUN.argv.index("--")] if "--" in RUN.argv else RUN.argv
    return "--json" in argv


class RUN:
    """This run's arguments (set by ``Group.main``) and the command being parsed or run."""

    argv: list[str] = []
    command: str | None = None


def fail(opts: Options | None, exc: PatcherError) -> NoReturn:
    if json_wanted(opts):
        emit(RUN.command, exc.exit_code, {"error": exc.message})
    echo(f"vllm-patcher: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


def usage_error(exc: click.ClickException) -> None:
    """Under ``--json`` a usage error is the envelope on stdout and one error line on stderr, as
    for every other refusal (not click's usage block); without it, click reports it as usual."""
    if json_wanted(None):
        emit(RUN.command, exc.exit_code, {"error": exc.format_message()})
        echo(f"vllm-patcher: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)


def named(parent: click.Context | None, info_name: str | None) -> None:
    """Remember the (sub)command about to be parsed, for an error before it runs."""
    RUN.command = " ".join(filter(None, [command_name(parent), info_name])) or None


_GLOBAL_KEYS = ("g_python", "g_directory", "g_json", "g_patches")


def global_params() -> list[click.Parameter]:
    """The top-level options, accepted again after any subcommand (``status --json``)."""
    return [
        click.Option(
            ["--python", "g_python"],
            metavar="PATH",
            multiple=True,
            help="Interpreter or venv directory of the vLLM environment to work on.",
        ),
        click.Option(
            ["--target", "g_directory"],
            metavar="DIR",
            multiple=True,
            help="site-packages directory of the vLLM to work on (no interpreter).",
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


def one_value(flag: str, values: tuple[Any, ...] | list[Any]) -> Any:
    """One value for an option that may be given more than once: the same path each time, or a
    usage error naming both (never the last one silently)."""
    if not values:
        return None
    first = values[0]
    for other in values[1:]:
        if _normal(flag, other) != _normal(flag, first):
            raise BadSetting(f"{flag} given twice with different values ({first}, {other})")
    return first


def merge_globals(ctx: click.Context) -> None:
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
        setattr(opts, attr, one_value(flag, values))
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


class Command(click.Command):
    """A subcommand that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        named(parent, info_name)
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        merge_globals(ctx)
        return super().invoke(ctx)


class SubGroup(click.Group):
    """A group of subcommands (``cluster``): takes the global options too, and so do its commands."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        named(parent, info_name)
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        merge_globals(ctx)
        return super().invoke(ctx)


class Group(click.Group):
    """Turn anticipated failures into one line and a documented exit code, never a traceback."""

    command_class = Command
    group_class = SubGroup

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any):
        """``lazy_commands``: name -> ``module:attribute`` of this package, imported when the
        command is run or listed, so a run of ``status`` never imports what ``port`` needs."""
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.named_command(cmd_name)

    def named_command(self, name: str) -> click.Command | None:
        """The command ``name``, its module imported on first use."""
        if name not in self.commands and name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[name].partition(":")
            loaded: click.Command = getattr(importlib.import_module(module, __package__), attribute)
            self.add_command(loaded, name)
        return self.commands.get(name)

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        RUN.argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        RUN.command = None
        return super().main(args, *rest, **kwargs)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.ClickException as exc:  # an unknown option before the command
            RUN.command = RUN.command or self._command_in_argv()
            usage_error(exc)
            raise

    def _command_in_argv(self) -> str | None:
        """The (sub)command the arguments name, for an error click raised before reaching it."""
        names: list[str] = []
        group: click.Group | None = self
        for arg in RUN.argv:
            if arg == "--":
                break
            if group is None:
                break
            found = self.named_command(arg) if group is self else group.commands.get(arg)
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
            fail(ctx.find_object(Options), exc)
        except click.ClickException as exc:
            usage_error(exc)
            raise
        except KeyboardInterrupt:
            message = "interrupted; every file is as it was before this run"
            if json_wanted(ctx.find_object(Options)):
                emit(RUN.command, EXIT_INTERRUPTED, {"error": message})
            echo(f"vllm-patcher: error: {message}", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            sys.exit(0)  # only reached outside echo; nothing was being written
        except OSError as exc:
            fail(ctx.find_object(Options), FileSystemError(fileops.os_error_message(None, exc)))


def waiting(opts: Options, command: str) -> progress.Progress | None:
    """What a run waiting for another's lock says, once: a line on stderr, none under --json."""
    return None if opts.as_json else progress.Progress.for_stderr(False, prefix=command)


_CHOSEN_TEXT = {target_mod.CHOSEN_VENV: "from VIRTUAL_ENV"}


def chosen_line(target: target_mod.Target) -> str:
    where = target.python if target.python is not None else target.site_packages
    why = _CHOSEN_TEXT.get(target.chosen_by, target.chosen_by)
    return f"target: {where}" + (f" ({why})" if why else "")
