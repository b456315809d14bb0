"""``payoff``'s one entry point for the command line: measure, analyse, show, and the exit code
(0 for ``pays`` and ``unknown``, 1 for ``loses`` and ``break-even``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import EXIT_CHECK_FAILED, EXIT_OK, NoDrafts, ServerUnreachable
from .analysis import BREAK_EVEN, LOSES, Analysis, analyse
from .measure import measure
from .report import lines


def exit_code(data: dict[str, Any]) -> int:
    return EXIT_CHECK_FAILED if data.get("verdict") in (LOSES, BREAK_EVEN) else EXIT_OK


def once(
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
    plot: Path | None,
    show: Callable[[Any], Any],
    as_json: bool,
) -> int:
    if plot is not None:
        from .plot import check_available

        check_available(plot)
    a = once(url, metrics, log, window_s, baseline)
    _show(a, show, as_json, clear=False)
    if plot is not None:
        from .plot import draw

        draw(a, plot)
    while watch and url is not None:
        try:
            if window_s <= 0:
                time.sleep(5.0)
            a = once(url, metrics, log, window_s, baseline)
        except KeyboardInterrupt:
            break
        except (NoDrafts, ServerUnreachable) as exc:  # one empty or unreadable window: go on
            if not as_json:  # under --json only full reports are printed
                show([f"payoff: {exc.message}; reading again"])
            continue
        _show(a, show, as_json, clear=sys.stdout.isatty())
        if plot is not None:
            from .plot import draw

            draw(a, plot)
    return exit_code(a.to_dict())


def _show(a: Analysis, show: Callable[[Any], Any], as_json: bool, clear: bool) -> None:
    if as_json:
        show(a.to_dict())
        return
    if clear:
        sys.stdout.write("\x1b[H\x1b[2J")
    show(lines(a))
