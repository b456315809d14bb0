"""The command line's click machinery: the application object in click's context (``pass_app``),
the global options accepted after any command, the groups that import a command's module when it
runs, and click's usage errors under ``--json``. What does not need click (options, the
application object, the envelope, the failure handler) is in ``base``; printing in ``streams``."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import OutputLost
from .base import Application, emit, merge_after
from .streams import echo, guard_streams

# Commands receive the run's application object from click's context.
pass_app = click.make_pass_decorator(Application)


def command_name(ctx: click.Context | None) -> str | None:
    """``status``, ``cluster status``: the command's path below the program name (a group's
    default command, ``payoff URL``, has no name of its own)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(n for n in reversed(names) if n) or None


def usage_error(app: Application, exc: click.ClickException) -> None:
    """Under ``--json`` a usage error is the envelope on stdout and one error line on stderr, as
    for every other refusal (not click's usage block); without it, click reports it as usual."""
    if app.json_in_argv():
        with contextlib.suppress(OutputLost):  # stdout is gone; the stderr line still says it
            emit(app.command, exc.exit_code, {"error": exc.format_message()})
        echo(f"vllm-patcher: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)


def named(parent: click.Context | None, info_name: str | None) -> None:
    """Remember the (sub)command about to be parsed, for an error before it runs."""
    app = parent.find_object(Application) if parent is not None else None
    if app is not None:
        app.command = " ".join(filter(None, [command_name(parent), info_name])) or None


# The options every command takes, before it or after it (``status --json``), declared once:
# the root group's parameter name, its flag and click's settings.
GLOBAL_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("python", "--python", {
        "metavar": "PATH", "multiple": True,
        "help": "Interpreter or venv directory of the vLLM environment to work on (default: "
                "this interpreter if it has vLLM, else the active VIRTUAL_ENV).",
    }),
    ("directory", "--target", {
        "metavar": "DIR", "multiple": True,
        "help": "site-packages directory of the vLLM to work on (no interpreter).",
    }),
    ("as_json", "--json", {"is_flag": True, "help": "Print machine-readable JSON."}),
    ("patch_dirs", "--patches", {
        "metavar": "DIR", "multiple": True, "type": click.Path(path_type=Path),
        "help": "A folder of your own patches (repeatable; else VLLM_PATCHER_PATCHES or "
                "pyproject.toml).",
    }),
)  # fmt: skip
AFTER = "after_"  # the prefix of a global option's name when given after the command


def global_params(prefix: str = "") -> list[click.Parameter]:
    """The global options as click parameters: the root group's (no prefix), and each
    command's copy (``AFTER``), accepted after the command's name."""
    return [
        click.Option([flag, prefix + name], **settings) for name, flag, settings in GLOBAL_OPTIONS
    ]


def merge_globals(ctx: click.Context) -> None:
    """Fold the global options given after a (sub)command into the run's ``Options``."""
    given = {name: ctx.params.pop(AFTER + name, None) for name, _, _ in GLOBAL_OPTIONS}
    app = ctx.find_object(Application)
    if app is None or app.given is None:  # pragma: no cover - the root group always sets it
        return
    merge_after(
        app.given,
        tuple(given["python"] or ()),
        tuple(given["directory"] or ()),
        bool(given["as_json"]),
        tuple(given["patch_dirs"] or ()),
    )


class Command(click.Command):
    """A subcommand that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_params(AFTER))

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


class ServeCommand(Command):
    """A command that takes the user's ``vllm serve`` arguments after ``--`` (payoff sweep,
    rehearse): an option it does not know is most likely one of those, given without ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.possibilities:  # close to one of ours: click's "Did you mean" says it
                raise
            raise click.NoSuchOption(
                exc.option_name,
                f"No such option: {exc.option_name}; vllm serve's arguments go after --: "
                f"vllm-patcher {command_name(ctx) or ctx.info_name} [OPTIONS] -- MODEL "
                "[SERVE_ARGS...]",
                exc.possibilities,
                ctx,
            ) from None


class SubGroup(Command, click.Group):
    """A group of subcommands (``cluster``): takes the global options too, and so do its commands."""

    command_class = Command


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

    def main(self, *args: Any, **kwargs: Any) -> Any:
        guard_streams()
        try:
            return super().main(*args, **kwargs)
        except OutputLost as exc:  # click printing --help or --version into a full disk
            echo(f"vllm-patcher: error: {exc.message}", err=True)
            sys.exit(exc.exit_code)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """The root context, holding this run's :class:`Application` as its object."""
        app = Application(args)
        extra["obj"] = app
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:  # an unknown option before the command
            app.command = app.command or self._command_in_argv(app.argv)
            usage_error(app, exc)
            raise

    def _command_in_argv(self, argv: list[str]) -> str | None:
        """The (sub)command the arguments name, for an error click raised before reaching it."""
        names: list[str] = []
        group: click.Group | None = self
        for arg in argv:
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
        app = ctx.find_object(Application)
        assert app is not None  # make_context put it there

        def body() -> Any:
            try:
                return super(Group, self).invoke(ctx)
            except click.ClickException as exc:
                usage_error(app, exc)
                raise

        return app.guarded(body)
