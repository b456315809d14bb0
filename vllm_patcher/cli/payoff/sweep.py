"""``payoff sweep``: the user's own ``vllm serve`` at each k, the same load, the best k measured."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from ...errors import BadSetting, NotWritable
from ...events import SweepEvent
from ...payoff.scrape import is_url
from .. import options, outcomes
from ..app import ServeCommand, pass_app
from ..base import Application
from ..render import payoff as render


def _running(urls: tuple[str, ...]) -> dict[int, str]:
    """``--url K=URL``, each k once."""
    out: dict[int, str] = {}
    for given in urls:
        k, eq, url = given.partition("=")
        if not eq or not k.strip().isdigit():
            raise BadSetting(f"--url {given!r}: give K=URL, e.g. --url 3=http://10.0.0.5:8000")
        if not is_url(url):
            raise BadSetting(f"--url {given!r}: {url!r} is not an http:// or https:// URL")
        if int(k) in out:
            raise BadSetting(f"--url names k = {int(k)} twice")
        if url.rstrip("/") in out.values():
            raise BadSetting(f"--url gives {url} for two k: each k is a server of its own")
        out[int(k)] = url.rstrip("/")
    return out


def _check_running(running: dict[int, str], serve_args: tuple[str, ...]) -> None:
    """--url K=URL: servers already running, one per k, the baseline among them."""
    if serve_args:
        raise BadSetting("give either the vllm serve arguments after -- or --url K=URL, not both")
    if click.get_current_context().get_parameter_source("ks") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    ):
        raise BadSetting("--url K=URL names each k: drop --k")
    if 0 not in running:
        raise BadSetting("--url needs 0=URL too: the server without speculation is the baseline")
    if len(running) < 2:
        raise BadSetting("--url needs 0=URL and at least one K=URL with K above 0")


@click.command("sweep", cls=ServeCommand)
@click.option("--k", "ks", default="0,1,2,3", show_default=True, help="Draft lengths (0: none).")
@options.concurrency
@options.num_prompts("Per run.")
@options.repeat("cell")
@options.dataset
@click.option(
    "--client-args",
    default="",
    metavar="'ARGS'",
    help="More arguments for vllm bench serve, in one quoted string (e.g. '--random-input-len "
    "512 --temperature 0').",
)
@options.ready_timeout("Seconds a server may take to become ready (a model load included).")
@click.option(
    "--log-dir",
    type=click.Path(path_type=Path),
    help="Where each server's log is kept (default: a new folder under the system's temp).",
)
@click.option(
    "--url",
    "urls",
    multiple=True,
    metavar="K=URL",
    help="Instead of a command: a server you run with k draft tokens (0: without speculation); "
    "repeat for each k, 0 included.",
)
@options.plot
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED, metavar="-- SERVE_ARGS...")
@pass_app
def payoff_sweep(
    app: Application,
    ks: str,
    concurrency: list[int],
    num_prompts: int,
    repeat: int,
    dataset: str,
    client_args: str,
    ready_timeout: float,
    log_dir: Path | None,
    urls: tuple[str, ...],
    plot: Path | None,
    serve_args: tuple[str, ...],
) -> None:
    """Start your own `vllm serve` (the arguments after `--`, model first) once per k on
    127.0.0.1, drive the same load with vLLM's benchmark client at each concurrency, stop it, and
    report every cell measured and the best k. One model load per k."""
    from ...serving.args import parse
    from ...sweep import run as sweep

    opts = app.options
    running = _running(urls)
    if running:
        _check_running(running, serve_args)
    args = None if running else parse(serve_args)
    try:
        extra = tuple(shlex.split(client_args))
    except ValueError as exc:
        raise BadSetting(f"--client-args: {exc}") from None
    plan = sweep.plan(
        sorted(running) if running else options.integers("--k", ks, "0,1,2,3"),
        concurrency,
        repeat,
        num_prompts,
        dataset,
        extra,
        log_dir,
        ready_timeout,
        running,
    )
    if plot is not None:
        from ..render.plot import check_available

        check_available(plot)
    target = opts.vllm_target("payoff sweep starts vLLM")  # one locate for the whole run
    from ...serving.server import signals_interrupt
    from ..render.events import sweep_lines

    def say(event: SweepEvent) -> None:  # stderr, whatever the output format: JSON on stdout
        for line in sweep_lines(event):
            app.progress(f"payoff sweep: {line}")

    with signals_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C
        result = sweep.run(str(target.python), args, plan, say, target.version)
    judged = result.verdict()
    failed = any(s.failure is not None for s in [*result.servers.values(), result.again] if s)
    code = outcomes.sweep(judged.verdict, failed)
    plot_error = None
    if plot is not None:  # the report is kept whatever happens to the picture
        from ..render.plot import draw_sweep

        try:
            draw_sweep(result, plot)
        except NotWritable as exc:
            plot_error = exc
    app.show(render.sweep(result, code, args.replaced if args is not None else (), plot_error))
