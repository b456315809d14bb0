"""The command line's standard streams: printing that survives a reader that went away (``| head``)
and turns a standard output that cannot be written into :class:`OutputLost` (exit 6), for our own
printing and click's alike."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from ..errors import OutputLost


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print, and survive a reader that went away (``| head``): once a change is committed, a
    closed pipe must not turn its exit code into a failure. A stdout that cannot be written
    (``> /dev/full``, an I/O error) is a failure: the output is lost, so :class:`OutputLost`
    (exit 6) says so on stderr. The root group routes the streams through :class:`_Guarded`,
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
