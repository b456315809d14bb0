"""What every command shares, without click: the run's options, printing, the ``--json``
envelope, and the one place anticipated failures become an error line and a documented exit code.

click's machinery (``app``) and the click-free path of status, apply and revert (``fast``) both
use these, so the two paths print, refuse and exit the same way."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from .. import fileops, progress
from ..catalogue.folders import load_catalogue, user_folders
from ..catalogue.model import NAME_RULE, Catalogue, valid_patch_name
from ..errors import (
    EXIT_INTERRUPTED,
    BadSetting,
    FileSystemError,
    OutputLost,
    PatcherError,
    TargetNotFound,
)
from ..install import locate as locate_mod
from ..install import target as target_mod


class Options:
    """The run's global options (a plain class: no dataclass on the start-up path)."""

    __slots__ = ("python", "directory", "as_json", "patch_dirs")

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


class RUN:
    """This run's arguments and the command being parsed or run (for an error's envelope)."""

    argv: list[str] = []
    command: str | None = None


def check_names(*names: str) -> None:
    """A NAME argument must be a patch name the loader takes (a usage error otherwise)."""
    for name in names:
        if not valid_patch_name(name):
            raise BadSetting(f"{name!r} is not a patch name; {NAME_RULE}")


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print, and survive a reader that went away (``| head``): once a change is committed, a
    closed pipe must not turn its exit code into a failure. A stdout that cannot be written
    (``> /dev/full``, an I/O error) is a failure: the output is lost, so :class:`OutputLost`
    (exit 6) says so on stderr. Both entry points route the streams through :class:`_Guarded`,
    which applies the same rule to click's printing; the handling here covers a caller that did
    not."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # closed (``>&-``): nothing to print to, as click.echo did
        return
    text = message + "\n" if nl else message
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # an ASCII-only stream (PYTHONIOENCODING=ascii): as click did
            encoding = stream.encoding or "utf-8"
            stream.write(text.encode(encoding, "replace").decode(encoding))
        stream.flush()
    except BrokenPipeError:
        _silence(stream, 2 if err else 1)
    except OSError as exc:
        _silence(stream, 2 if err else 1)
        if not err:  # on stderr there is nowhere left to say it
            raise output_lost(exc) from exc


def output_lost(exc: OSError) -> OutputLost:
    """The failure for a standard output that cannot be written."""
    return OutputLost(
        f"cannot write to standard output: {exc.strerror or exc}; this run's output is lost "
        "(after an apply or revert, `vllm-patcher status` shows what it did): run it again with "
        "its output going somewhere writable"
    )


def _silence(stream: Any, fd: int) -> None:
    """Point ``fd`` at /dev/null and drop what ``stream`` still buffers for it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    with contextlib.suppress(OSError, ValueError):
        stream.flush()  # the buffer now drains into /dev/null


class _Guarded:
    """A standard stream that is written through this wrapper, so that whoever prints (our
    ``echo``, click's help and usage errors) meets the same rule when it cannot be written: the
    stream is silenced first, then standard output raises :class:`OutputLost` (the run's output
    is gone, and the exit code must say so) and standard error falls quiet (diagnostics have
    nowhere else to go: a failing stderr changes neither what a run does nor its exit code). A
    reader that went away (a broken pipe) silences either stream and is no failure, as in
    ``echo``. The binary ``buffer`` under it is guarded the same way (click writes there when it
    judges the text stream's encoding wrong, ``PYTHONIOENCODING=ascii``)."""

    def __init__(self, stream: Any, fd: int) -> None:
        self._stream = stream
        self._fd = fd
        self._lost: OSError | None = None  # once failed, every later write fails the same way
        raw = getattr(stream, "buffer", None)
        if raw is not None:
            self.buffer = _GuardedBuffer(raw, self)

    def failed(self, exc: OSError) -> None:
        if isinstance(exc, BrokenPipeError):  # the rest goes nowhere, as the reader chose
            _silence(self._stream, self._fd)
            return
        if self._lost is None:
            self._lost = exc
            _silence(self._stream, self._fd)
        if self._fd == 1:  # (a caller that swallows this one meets it again at its next write)
            raise output_lost(exc) from exc

    def lost(self) -> bool:
        """Whether the stream failed: a write now fails again (stdout) or does nothing."""
        if self._lost is None:
            return False
        self.failed(self._lost)
        return True

    def write(self, text: str) -> int:
        if self.lost():
            return len(text)
        try:
            return int(self._stream.write(text))
        except OSError as exc:
            self.failed(exc)
            return len(text)

    def flush(self) -> None:
        if self._lost is not None:  # nothing left to flush (and exit's own flush must not fail)
            return
        try:
            self._stream.flush()
        except OSError as exc:
            self.failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _GuardedBuffer:
    """The binary buffer of a :class:`_Guarded` stream, under the same rule and state."""

    def __init__(self, raw: Any, owner: _Guarded) -> None:
        self._raw = raw
        self._owner = owner

    def write(self, data: bytes) -> int:
        if self._owner.lost():
            return len(data)
        try:
            return int(self._raw.write(data))
        except OSError as exc:
            self._owner.failed(exc)
            return len(data)

    def flush(self) -> None:
        if self._owner._lost is not None:
            return
        try:
            self._raw.flush()
        except OSError as exc:
            self._owner.failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def guard_streams() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` through :class:`_Guarded` (once; a closed stream
    stays None)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout, 1)  # type: ignore[assignment]
    if sys.stderr is not None and not isinstance(sys.stderr, _Guarded):
        sys.stderr = _Guarded(sys.stderr, 2)  # type: ignore[assignment]


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


def report(exit_code: int, data: dict[str, Any]) -> None:
    """The running command's ``--json`` report (``RUN.command`` names it), under the envelope."""
    emit(RUN.command, exit_code, data)


def json_wanted(opts: Options | None) -> bool:
    """``--json`` given anywhere, even when the failure came before the options were merged."""
    if opts is not None and opts.as_json:
        return True
    argv = RUN.argv[: RUN.argv.index("--")] if "--" in RUN.argv else RUN.argv
    return "--json" in argv


def fail(opts: Options | None, exc: PatcherError) -> NoReturn:
    _error(opts, exc.exit_code, exc.message)


def _error(opts: Options | None, exit_code: int, message: str) -> NoReturn:
    """The failure's JSON twin on stdout when ``--json`` was asked for, its line on stderr."""
    if json_wanted(opts):
        with contextlib.suppress(OutputLost):  # stdout is gone; the stderr line still says it
            emit(RUN.command, exit_code, {"error": message})
    echo(f"vllm-patcher: error: {message}", err=True)
    sys.exit(exit_code)


def guarded(opts: Callable[[], Options | None], body: Callable[[], Any]) -> Any:
    """Run a command's body; an anticipated failure becomes one error line and its exit code.

    ``opts`` gives the run's options as far as they were read when the failure came."""
    try:
        return body()
    except PatcherError as exc:
        fail(opts(), exc)
    except KeyboardInterrupt:
        _error(opts(), EXIT_INTERRUPTED, "interrupted; every file is as it was before this run")
    except BrokenPipeError:
        sys.exit(0)  # only reached outside echo; nothing was being written
    except OSError as exc:
        fail(opts(), FileSystemError(fileops.os_error_message(None, exc)))


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
    if opts.python and opts.directory:
        raise BadSetting("--python and --target are exclusive; pass one")
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
    if opts.python and opts.directory:
        raise BadSetting("--python and --target are exclusive; pass one")


def waiting(opts: Options, command: str) -> progress.Progress | None:
    """What a run waiting for another's lock says, once: a line on stderr, none under --json."""
    return None if opts.as_json else progress.Progress.for_stderr(False, prefix=command)


_CHOSEN_TEXT = {target_mod.CHOSEN_VENV: "from VIRTUAL_ENV"}


def chosen_line(target: target_mod.Target) -> str:
    where = target.python if target.python is not None else target.site_packages
    why = _CHOSEN_TEXT.get(target.chosen_by, target.chosen_by)
    return f"target: {where}" + (f" ({why})" if why else "")


def vllm_python(opts: Options, what: str) -> str:
    """The target's interpreter for a command that runs vLLM (``what``: "payoff bench runs
    vLLM's benchmark client"): a --target tree or no vLLM here is refused, naming --python."""
    if opts.directory is not None:
        raise BadSetting(f"{what}: give --python, not --target")
    try:
        target = opts.target()
    except TargetNotFound:
        if opts.python is not None:
            raise
        raise TargetNotFound(
            f"{what} and this interpreter has no vLLM; give the vLLM venv with "
            "--python /path/to/venv"
        ) from None
    if target.python is None:  # pragma: no cover - a located install always has its interpreter
        raise BadSetting(f"{what}: give --python, not --target")
    return str(target.python)
