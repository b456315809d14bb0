"""``payoff``'s one entry point for the command line: measure, analyse, show, and the exit code
(0 for ``pays`` and ``unknown``, 1 for ``loses`` and ``break-even``).

``--watch`` reads again after a window it cannot judge (no drafts, a server down or restarted, two
readings that are not one window), with a pause between reads, and stops when nobody reads its
output any more (``show`` says so) or on Ctrl-C."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import NoDrafts, NoSpeculation, PatcherError, ServerUnreachable
from .analysis import Analysis, analyse
from .measure import check, measure
from .window import NotOneWindow

PAUSE = 5.0  # seconds between reads that gave no report, and between --window 0 reports
CARRY_ON = (NoDrafts, NoSpeculation, ServerUnreachable, NotOneWindow)


@dataclass(frozen=True)
class Retry:
    """A window ``--watch`` could not judge: why, and the pause before it reads again."""

    error: PatcherError
    pause: float


# show(a report, or a window it could not judge; refresh) -> whether anyone still reads the
# output. The command line renders both (text or JSON) in one place, and draws a report's --plot
# before it shows it (a plot that fails leaves one answer, its error).
Show = Callable[["Analysis | Retry", bool], bool]


def measure_once(
    url: str | None,
    metrics: tuple[Path, ...],
    log: Path | None,
    window_s: float,
    baseline: tuple[str, ...],
) -> Analysis:
    spec, base = measure(url, metrics, log, window_s, baseline)
    return analyse(spec, base)


def report(
    url: str | None,
    metrics: tuple[Path, ...],
    log: Path | None,
    window_s: float,
    baseline: tuple[str, ...],
    *,
    watch: bool,
    show: Show,
    once: Callable[..., Analysis] = measure_once,
    sleep: Callable[[float], None] = time.sleep,
) -> Analysis:
    """Measure and show once, or every window until Ctrl-C (``watch``); the last analysis shown
    (the command line's exit code is judged from it)."""
    check(url, metrics, log, window_s, baseline)
    if not watch or url is None:
        a = once(url, metrics, log, window_s, baseline)
        show(a, False)
        return a
    last: Analysis | None = None
    failed: Exception | None = None
    try:
        while True:
            try:
                a = once(url, metrics, log, window_s, baseline)
            except CARRY_ON as exc:  # a window that cannot be judged: say so, pause, read again
                failed = exc
                if not show(Retry(exc, PAUSE), False):
                    break
                sleep(PAUSE)
                continue
            read, last = show(a, last is not None), a
            if not read:
                break
            if window_s <= 0:
                sleep(PAUSE)
    except KeyboardInterrupt:
        pass
    if last is None:
        if failed is not None:
            raise failed
        raise KeyboardInterrupt
    return last
