"""``payoff URL`` (the group's default command): a running server's counters, judged."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ...errors import BadSetting
from ...payoff import run as payoff_run
from ...payoff.measure import check, one_source
from ...payoff.scrape import is_url
from .. import options, outcomes
from ..app import Command, pass_app
from ..base import Application
from ..render import payoff as render


@click.command("report", cls=Command, hidden=True)
@click.argument("sources", nargs=-1)
@click.option(
    "--metrics",
    "metrics",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="A saved scrape of /metrics (one: since start; two: the window between them).",
)
@click.option(
    "--log",
    "log",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="vLLM's log: its SpecDecoding lines (approximate; no baseline).",
)
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
@options.plot
@pass_app
def payoff_report(
    app: Application,
    sources: tuple[str, ...],
    metrics: tuple[Path, ...],
    log: Path | None,
    window_s: float,
    baseline: tuple[str, ...],
    watch: bool,
    plot: Path | None,
) -> None:
    opts = app.options
    url = next((s for s in sources if is_url(s)), None)
    if url is not None:
        one_source(url, metrics, log)
    window_given = click.get_current_context().get_parameter_source("window_s") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    if (metrics or log) and (watch or window_given):
        raise BadSetting(
            "--window and --watch read a live server twice; saved scrapes and logs carry their "
            "own window: drop them, or give the server's URL"
        )
    if metrics:
        metrics = _in_given_order(app.argv, metrics + tuple(Path(s) for s in sources))
    elif len(sources) > 1:
        raise BadSetting(f"payoff reads one server at a time; got {len(sources)} URLs")
    elif sources and not is_url(sources[0]):
        raise BadSetting(
            f"{sources[0]} is not a server URL (http://HOST:PORT); for a saved scrape write "
            f"payoff --metrics {sources[0]}"
        )
    gone = _stdout_gone_check()
    if plot is not None:  # the options refused first, then a plot that cannot be drawn
        from ..render.plot import check_available

        check(url, metrics, log, window_s, baseline)
        check_available(plot)

    def show(shown: Any, refresh: bool) -> bool:
        if isinstance(shown, payoff_run.Retry) and opts.as_json:
            return not gone()  # under --json: full reports only
        if plot is not None and not isinstance(shown, payoff_run.Retry):
            from ..render.plot import draw

            draw(shown, plot)  # first: a plot that fails leaves one answer (its error)
        clear = refresh and sys.stdout is not None and sys.stdout.isatty()
        app.display(render.report(shown, clear))
        return not gone()

    last = payoff_run.report(
        url,
        metrics,
        log,
        window_s,
        baseline,
        watch=watch,
        show=show,
    )
    sys.exit(outcomes.verdict(last.verdict))


def _in_given_order(argv: list[str], files: tuple[Path, ...]) -> tuple[Path, ...]:
    """The scrapes in the order they stand on the command line ``argv`` (``payoff A --metrics
    B`` is A then B, though click hands the option's value over first)."""

    def place(path: Path) -> int:
        return argv.index(str(path)) if str(path) in argv else len(argv)

    return tuple(sorted(files, key=place))


def _stdout_gone_check() -> Any:
    """Whether nobody reads standard output any more: closed (``>&-``), or a reader that went
    away (``| head``), after which the guarded stream points it at /dev/null. --watch stops."""

    def identity() -> tuple[int, int] | None:
        try:
            info = os.fstat(1)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    try:
        null = os.stat(os.devnull)
        devnull: tuple[int, int] | None = (null.st_dev, null.st_ino)
    except OSError:
        devnull = None
    at_start = identity()

    def gone() -> bool:
        if sys.stdout is None or at_start is None:
            return True
        now = identity()
        return now is None or (now == devnull and at_start != devnull)

    return gone
