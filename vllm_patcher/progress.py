"""Progress lines on stderr, for the person waiting on a slow step (verify's tiers, a lock, a fetch).

Three modes, picked once per run by ``Progress.for_stderr``:

- ``tty`` (stderr is a terminal): a step's line appears when it starts, ``verify: import and
  behaviour tiers ...``; after a second it counts the seconds in place (carriage return, no other
  control codes) and is finished with the elapsed time when the step ends: ``... 7.3 s``.
- ``plain`` (stderr is a pipe or a file, or ``TERM=dumb``): nothing when a step starts, one line
  when it ends, the same words as the terminal's final line (``verify: state tier ... 0.1 s``).
  Never a carriage return, never an escape code: a log gets one finished line per step.
- ``off`` (``--json``): nothing at all; stderr carries only an error.

A one-off message (``progress("downloading ...")``, a lock wait) is one line in ``tty`` and
``plain``. Only the CLI makes one: the libraries pass typed events (``events.py``) to a callback,
and ``cli/render/events.py`` words them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

TTY, PLAIN, OFF = "tty", "plain", "off"
TICK = 1.0  # seconds between the terminal's in-place counts


def elapsed_text(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 0.05 else "< 0.1 s"


class Progress:
    """Steps and messages on one stream; at most one step is open at a time."""

    def __init__(self, mode: str, prefix: str = "", stream: TextIO | None = None) -> None:
        self.mode = mode
        self.prefix = f"{prefix}: " if prefix else ""
        self._stream = stream
        self._write_lock = threading.Lock()
        self._label: str | None = None
        self._started = 0.0
        self._line_open = False  # the open step's line is on the terminal, without its newline
        self._stop: threading.Event | None = None
        self._ticker: threading.Thread | None = None

    @classmethod
    def for_stderr(cls, as_json: bool, prefix: str = "") -> Progress:
        if as_json or sys.stderr is None:  # --json, or stderr closed (``2>&-``)
            return cls(OFF, prefix)
        interactive = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        return cls(TTY if interactive else PLAIN, prefix)

    def __call__(self, message: str) -> None:
        """One line now (a step open on the terminal is continued on the next line)."""
        if self.mode == OFF:
            return
        with self._write_lock:
            if self._line_open:
                self._write("\n")
                self._line_open = False
            self._write(f"{self.prefix}{message}\n")

    def step(self, label: str) -> Progress:
        """Start ``label`` (ending the step still open); ``done()`` or a ``with`` block ends it."""
        self.done()
        self._label, self._started = label, time.monotonic()
        if self.mode == TTY:
            with self._write_lock:
                self._write(self._line())
                self._line_open = True
            self._stop = threading.Event()
            self._ticker = threading.Thread(target=self._tick, args=(self._stop,), daemon=True)
            self._ticker.start()
        return self

    def done(self, note: str = "") -> float | None:
        """End the open step with its elapsed time (and ``note``); its seconds, or None."""
        if self._label is None:
            return None
        elapsed = time.monotonic() - self._started
        if self._stop is not None and self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._stop = self._ticker = None
        final = self._line(elapsed_text(elapsed) + (f" ({note})" if note else ""))
        if self.mode != OFF:
            with self._write_lock:
                self._write(("\r" if self._line_open else "") + final + "\n")
                self._line_open = False
        self._label = None
        return elapsed

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.done()
        else:
            self.done("interrupted" if issubclass(kind, KeyboardInterrupt) else "stopped")

    def _line(self, tail: str = "") -> str:
        return f"{self.prefix}{self._label} ..." + (f" {tail}" if tail else "")

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(TICK):
            with self._write_lock:
                if self._line_open:
                    seconds = int(time.monotonic() - self._started)
                    self._write("\r" + self._line(f"{seconds} s"))

    def _write(self, text: str) -> None:
        """Write and flush; a reader that went away, or a stream that cannot be written
        (``2>/dev/full``), must not fail the command: progress is a courtesy."""
        stream = self._stream or sys.stderr
        if stream is None:  # stderr closed
            return
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            self.mode = OFF
