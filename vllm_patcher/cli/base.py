"""What every command shares, without click: the run's options, the application object that
owns display (text, the ``--json`` envelope) and aborting, and the one place anticipated failures
become an error line and a documented exit code. click's machinery is in ``app``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, NoReturn

from .. import fileops, progress
from ..catalogue.folders import load_catalogue, user_folders
from ..catalogue.model import NAME_RULE, Catalogue, valid_patch_name
from ..errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadSetting,
    FileSystemError,
    OutputLost,
    PatcherError,
    TargetNotFound,
)
from ..install import locate as locate_mod
from ..install import target as target_mod
from .streams import echo


class Options:
    """The run's global options (a plain class: no dataclass on the start-up path)."""

    __slots__ = ("python", "directory", "as_json", "patch_dirs", "located", "_builtins", "_whole")

    def __init__(
        self,
        python: str | None,
        directory: str | None,
        as_json: bool,
        patch_dirs: tuple[Path, ...] = (),
    ) -> None:
        self.python = python
        self.directory = directory
        self.as_json = as_json
        self.patch_dirs = patch_dirs
        self.located = locate_mod.Located()  # this run's: each install is located once
        self._builtins: Catalogue | None = None  # this run's catalogue, loaded once (below)
        self._whole: Catalogue | None = None

    def target(self) -> target_mod.Target:
        """The vLLM install to work on (--python, --target or the default), located once."""
        return self.located.locate(self.python, self.directory, self.builtins())

    def vllm_target(self, what: str) -> target_mod.Target:
        """The install of a command that runs vLLM, located once (its interpreter is the one to
        run; ``what``: "payoff sweep starts vLLM"): a --target tree or no vLLM here is refused,
        naming --python."""
        if self.directory is not None:
            raise BadSetting(f"{what}: give --python, not --target")
        try:
            target = self.target()
        except TargetNotFound:
            if self.python is not None:
                raise
            raise TargetNotFound(
                f"{what} and this interpreter has no vLLM; give the vLLM venv with "
                "--python /path/to/venv"
            ) from None
        if target.python is None:  # pragma: no cover - a located install has its interpreter
            raise BadSetting(f"{what}: give --python, not --target")
        return target

    def interpreter(self, what: str) -> str:
        """The interpreter of a command that runs code elsewhere and needs no vLLM here (the
        cluster's Ray driver): --python's, else this one with vLLM, else the active venv's; a
        --target tree is refused (``what`` says why)."""
        if self.directory is not None:
            raise BadSetting(what)
        return locate_mod.interpreter(self.python) if self.python else locate_mod.default_python()

    def hub_python(self) -> str:
        """The interpreter that looks repo ids up in the local Hugging Face cache (doctor,
        serve-args), through this run's locate."""
        return locate_mod.hub_python(self.python, self.directory, self.target)

    def builtins(self) -> Catalogue:
        """The built-in patches, loaded once a run (or taken from the whole catalogue when the run
        loaded that first): all locate needs, so a command that reads no patch of the user's
        (revert, payoff, rehearse) never reads their folders."""
        if self._builtins is None:
            whole = self._whole
            self._builtins = whole.builtins() if whole is not None else load_catalogue()
        return self._builtins

    def whole(self) -> Catalogue:
        """Every patch the run knows, the built-ins plus the user's folders, none selected:
        loaded once a run (the built-ins reused when locate loaded them first)."""
        if self._whole is None:
            folders, _ = user_folders(self.patch_dirs)
            self._whole = load_catalogue(folders, builtins=self._builtins)
        return self._whole

    def catalogue(self, names: tuple[str, ...] = ()) -> Catalogue:
        """The built-ins plus the user's folders; ``names`` (or pyproject's select) narrows it."""
        _, select = user_folders(self.patch_dirs)
        wanted = names or tuple(select)
        return self.whole().select(wanted) if wanted else self.whole()

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


SCHEMA = "vllm-patcher/1"  # the envelope's version; vllm_patcher/schema/output.schema.json


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


class Shown(NamedTuple):
    """What a command shows, rendered from its result in one place per command group
    (``render/``): the report's keys under ``--json``, the text lines without it."""

    code: int  # the exit code
    data: dict[str, Any] | None  # the --json report (None: the text is the output in both modes)
    text: Sequence[str] = ()  # stdout lines, without --json
    notes: Sequence[str] = ()  # stderr lines, without --json
    stderr: Sequence[str] = ()  # stderr lines in both modes, after the report


class Application:
    """One run of the command line: its arguments, the (sub)command being parsed or run, and the
    global options once read. Made by the root group and reached through click's context
    (``app.pass_app``); it owns display (``echo``, ``show``, the ``--json`` envelope) and aborting
    (``fail``: one error line and the documented exit code)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = [str(a) for a in argv]
        self.command: str | None = None  # for an error before the command parses its options
        self.given: Options | None = None  # set by the root group once its options are read

    @property
    def options(self) -> Options:
        """The global options (a command body always runs after the root group read them)."""
        assert self.given is not None
        return self.given

    def json_in_argv(self) -> bool:
        """``--json`` given anywhere, even when the failure came before the options were read."""
        argv = self.argv[: self.argv.index("--")] if "--" in self.argv else self.argv
        return "--json" in argv

    def wants_json(self) -> bool:
        return (self.given is not None and self.given.as_json) or self.json_in_argv()

    def echo(self, message: str = "", *, err: bool = False, nl: bool = True) -> None:
        echo(message, err=err, nl=nl)

    def progress(self, line: str) -> None:
        """A long command's progress: one line on stderr whatever the output format (the JSON
        report stays alone on stdout); lost quietly when nobody reads stderr."""
        with contextlib.suppress(OutputLost, OSError):
            echo(line, err=True)

    def report(self, exit_code: int, data: dict[str, Any]) -> None:
        """The running command's ``--json`` report, under the envelope."""
        emit(self.command, exit_code, data)

    def display(self, shown: Shown) -> None:
        """Print what a command shows: its report under ``--json``, else its text."""
        if self.options.as_json and shown.data is not None:
            self.report(shown.code, shown.data)
        else:
            for line in shown.text:
                echo(line)
            for line in shown.notes:
                echo(line, err=True)
        for line in shown.stderr:
            echo(line, err=True)

    def show(self, shown: Shown) -> None:
        """Display, then exit with the shown code when it is not 0."""
        self.display(shown)
        if shown.code != EXIT_OK:
            sys.exit(shown.code)

    def fail(self, exc: PatcherError) -> NoReturn:
        self.abort(exc.exit_code, exc.message)

    def abort(self, exit_code: int, message: str) -> NoReturn:
        """The failure's JSON twin on stdout when ``--json`` was asked for, its line on stderr."""
        if self.wants_json():
            with contextlib.suppress(OutputLost):  # stdout is gone; the stderr line still says it
                emit(self.command, exit_code, {"error": message})
        echo(f"vllm-patcher: error: {message}", err=True)
        sys.exit(exit_code)

    def guarded(self, body: Callable[[], Any]) -> Any:
        """Run a command's body; an anticipated failure becomes one error line and its exit code."""
        try:
            return body()
        except PatcherError as exc:
            self.fail(exc)
        except KeyboardInterrupt:
            self.abort(EXIT_INTERRUPTED, "interrupted; every file is as it was before this run")
        except BrokenPipeError:
            sys.exit(EXIT_OK)  # only reached outside echo; nothing was being written
        except OSError as exc:
            self.fail(FileSystemError(fileops.os_error_message(None, exc)))


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


def root_options(
    python: tuple[str, ...], directory: tuple[str, ...], as_json: bool, patches: tuple[Path, ...]
) -> Options:
    """The options given before the command, checked as the root command checks them."""
    opts = Options(
        one_value("--python", python), one_value("--target", directory), as_json, patches
    )
    _one_install(opts)
    from ..patching.journal import lock_timeout  # --help and --version never need the journal

    lock_timeout()  # a bad VLLM_PATCHER_LOCK_TIMEOUT is a usage error for every command
    return opts


def merge_after(
    opts: Options,
    python: tuple[str, ...],
    directory: tuple[str, ...],
    as_json: bool,
    patches: tuple[Path, ...],
) -> None:
    """Fold the global options given after a (sub)command into the run's ``Options``.

    The same option in both places must agree: different values are a usage error, never a guess.
    """
    if as_json:
        opts.as_json = True
    for attr, flag, given in (("python", "--python", python), ("directory", "--target", directory)):
        values = [v for v in (getattr(opts, attr), *given) if v is not None]
        setattr(opts, attr, one_value(flag, values))
    if patches:
        if opts.patch_dirs and [os.path.abspath(p) for p in opts.patch_dirs] != [
            os.path.abspath(p) for p in patches
        ]:
            raise BadSetting(
                "--patches given before and after the command with different folders; "
                "give them in one place"
            )
        opts.patch_dirs = patches
    _one_install(opts)


def _one_install(opts: Options) -> None:
    if opts.python and opts.directory:
        raise BadSetting("--python and --target are exclusive; pass one")


def waiting(opts: Options, command: str) -> progress.Progress | None:
    """What a run waiting for another's lock says, once: a line on stderr, none under --json."""
    return None if opts.as_json else progress.Progress.for_stderr(False, prefix=command)


_CHOSEN_TEXT = MappingProxyType({target_mod.CHOSEN_VENV: "from VIRTUAL_ENV"})


def chosen_line(target: target_mod.Target) -> str:
    where = target.python if target.python is not None else target.site_packages
    why = _CHOSEN_TEXT.get(target.chosen_by, target.chosen_by)
    return f"target: {where}" + (f" ({why})" if why else "")
