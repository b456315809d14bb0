"""payoff: does speculative decoding pay? (its report is the default command)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import BadSetting
from ..payoff import run as payoff_run
from ..payoff.measure import one_source
from ..payoff.scrape import is_url
from . import options, outcomes
from .app import SubGroup, pass_app
from .base import Application, vllm_python
from .render import payoff as render


class _DefaultGroup(SubGroup):
    """``payoff URL`` runs the report; ``payoff bench ...`` the benchmark: a group whose first
    argument, when it names no subcommand, belongs to the default one."""

    default = "report"

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "", self.commands[self.default], args

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``payoff --help`` shows the report's own options, then the subcommands."""
        report = self.commands[self.default]
        rows = [("URL", "The server's base URL (its /metrics is read twice, --window apart).")]
        rows += [
            r
            for p in report.get_params(ctx)
            if isinstance(p, click.Option) and (r := p.get_help_record(ctx)) is not None
        ]
        with formatter.section("Options of the report (payoff URL ...)"):
            formatter.write_dl(rows)
        self.format_commands(ctx, formatter)


_PAYOFF_SOURCES = (
    "URL: the server's base URL (its /metrics is read twice, --window apart); or --metrics FILE "
    "[FILE]: saved scrapes (one: since start; two: the window between them); or --log FILE: vLLM's "
    "SpecDecoding log lines."
)


@click.group(
    cls=_DefaultGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    context_settings={"ignore_unknown_options": True},
    help="Does speculative decoding pay? " + _PAYOFF_SOURCES + " `payoff bench URL "
    "--baseline-url URL2` drives vLLM's own benchmark client against both.",
)
@click.pass_context
def payoff(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise BadSetting("payoff needs a server URL, --metrics FILE [FILE] or --log FILE")


@payoff.command("report", hidden=True)
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
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png", help="Draw it.")
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

    def show(shown: Any, refresh: bool) -> bool:
        if isinstance(shown, str) and opts.as_json:
            return not gone()  # under --json: full reports only
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
        plot=plot,
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


@payoff.command("bench")
@click.argument("url")
@click.option(
    "--baseline-url", required=True, metavar="URL", help="The same model, no speculation."
)
@options.concurrency
@options.num_prompts()
@options.repeat("concurrency")
@options.dataset
@options.plot
@click.argument("client_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CLIENT ARGS]")
@pass_app
def payoff_bench(
    app: Application,
    url: str,
    baseline_url: str,
    concurrency: str,
    num_prompts: int,
    repeat: int,
    dataset: str,
    plot: Path | None,
    client_args: tuple[str, ...],
) -> None:
    """Run the same load on both servers with vLLM's own benchmark client (`vllm bench serve`, in
    the target interpreter), per concurrency; arguments after `--` go to the client."""
    from ..payoff import bench

    opts = app.options
    levels = options.integers("--concurrency", concurrency, "1,4,16")
    if plot is not None:
        from ..payoff.plot import check_available

        check_available(plot)
    from ..errors import BenchInterrupted
    from ..serving.server import signals_interrupt

    python = vllm_python(opts, "payoff bench runs vLLM's benchmark client")
    try:
        with signals_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C, the client's group stopped
            result = bench.run(
                python, url, baseline_url, levels, num_prompts, dataset, client_args,
                progress=lambda line: app.progress(line), repeat=repeat,
            )  # fmt: skip
    except KeyboardInterrupt:
        raise BenchInterrupted(
            "interrupted; the load client is stopped, neither server is under its load"
        ) from None
    if plot is not None:
        from ..payoff.plot import draw_bench

        draw_bench(result, plot)
    app.show(render.bench(result))


def _register_sweep() -> None:
    from .sweep import payoff_sweep

    payoff.add_command(payoff_sweep)


_register_sweep()
