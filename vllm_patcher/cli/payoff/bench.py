"""``payoff bench``: the same load on two servers with vLLM's own benchmark client."""

from __future__ import annotations

from pathlib import Path

import click

from ...events import LoadEvent
from .. import options
from ..app import Command, pass_app
from ..base import Application
from ..render import payoff as render
from ..render.events import bench_line


@click.command("bench", cls=Command)
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
    concurrency: list[int],
    num_prompts: int,
    repeat: int,
    dataset: str,
    plot: Path | None,
    client_args: tuple[str, ...],
) -> None:
    """Run the same load on both servers with vLLM's own benchmark client (`vllm bench serve`, in
    the target interpreter), per concurrency; arguments after `--` go to the client."""
    from ...load import bench

    opts = app.options
    bench.check(client_args, url, baseline_url)  # before the interpreter is looked for
    if plot is not None:
        from ..render.plot import check_available

        check_available(plot)
    from ...serving.server import signals_interrupt

    python = str(opts.vllm_target("payoff bench runs vLLM's benchmark client").python)

    def say(event: LoadEvent) -> None:  # stderr, whatever the output format
        line = bench_line(event)
        if line is not None:
            app.progress(f"payoff bench: {line}")

    with signals_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C, the client's group stopped
        result = bench.run(python, url, baseline_url, concurrency, num_prompts, dataset,
                           client_args, say=say, repeat=repeat)  # fmt: skip
    if plot is not None:
        from ..render.plot import draw_bench

        draw_bench(result, plot)
    app.show(render.bench(result))
