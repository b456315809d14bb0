"""``payoff sweep``: the user's own ``vllm serve`` at each k, the same load, the best k measured."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ..errors import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_SERVER_NOT_STARTED,
    BadSetting,
    SweepInterrupted,
    TargetNotFound,
)
from .app import json_report
from .base import Options, echo


def _integers(option: str, value: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise BadSetting(f"{option} {value!r}: give integers like 0,1,2,3") from None
    if not levels:
        raise BadSetting(f"{option}: give at least one value")
    return levels


@click.command("sweep")
@click.option("--k", "ks", default="0,1,2,3", show_default=True, help="Draft lengths (0: none).")
@click.option(
    "--concurrency", default="1,4,16", show_default=True, help="Comma-separated concurrencies."
)
@click.option("--num-prompts", default=64, show_default=True, type=int, help="Per run.")
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=int,
    help="Runs per cell: a verdict only where every run's figures fall in one class.",
)
@click.option("--dataset", default="random", show_default=True, help="vllm bench serve's dataset.")
@click.option(
    "--client-args",
    default="",
    metavar="'ARGS'",
    help="More arguments for vllm bench serve, in one quoted string (e.g. '--random-input-len "
    "512 --temperature 0').",
)
@click.option(
    "--ready-timeout",
    default=1800.0,
    show_default=True,
    type=float,
    help="Seconds a server may take to become ready (a model load included).",
)
@click.option(
    "--log-dir",
    type=click.Path(path_type=Path),
    help="Where each server's log is kept (default: a new folder under the system's temp).",
)
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png", help="Draw it.")
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED, metavar="-- SERVE_ARGS...")
@click.pass_obj
def payoff_sweep(
    opts: Options,
    ks: str,
    concurrency: str,
    num_prompts: int,
    repeat: int,
    dataset: str,
    client_args: str,
    ready_timeout: float,
    log_dir: Path | None,
    plot: Path | None,
    serve_args: tuple[str, ...],
) -> None:
    """Start your own `vllm serve` (the arguments after `--`, model first) once per k on
    127.0.0.1, drive the same load with vLLM's benchmark client at each concurrency, stop it, and
    report every cell measured and the best k. One model load per k."""
    from ..payoff import sweep
    from ..serving.args import parse

    args = parse(serve_args)
    try:
        extra = tuple(shlex.split(client_args))
    except ValueError as exc:
        raise BadSetting(f"--client-args: {exc}") from None
    plan = sweep.plan(
        _integers("--k", ks),
        _integers("--concurrency", concurrency),
        repeat,
        num_prompts,
        dataset,
        extra,
        log_dir,
        ready_timeout,
    )
    if args.replaced:
        echo(f"payoff sweep: {' and '.join(args.replaced)} ignored: its servers listen on 127.0.0.1 "
             "and a free port", err=True)  # fmt: skip
    if plot is not None:
        from ..payoff.plot import check_available

        check_available(plot)
    if opts.directory is not None:
        raise BadSetting("payoff sweep starts vLLM: give --python, not --target")
    try:
        target = opts.target()
    except TargetNotFound:
        if opts.python is not None:
            raise
        raise TargetNotFound(
            "payoff sweep starts vLLM and this interpreter has no vLLM; give the vLLM venv with "
            "--python /path/to/venv"
        ) from None
    if target.python is None:  # pragma: no cover - a located install always has its interpreter
        raise BadSetting("payoff sweep starts vLLM: give --python, not --target")
    say = None if opts.as_json else (lambda line: echo(f"payoff sweep: {line}", err=True))
    if say is not None:
        say(
            f"{len(plan.ks)} servers to start, one model load each (k = "
            f"{', '.join(map(str, plan.ks))}), {len(plan.concurrencies)} concurrencies x "
            f"{plan.repeat} run(s) of {plan.prompts} prompts on each; logs in {plan.log_dir}"
        )
    try:
        result = sweep.run(str(target.python), args, plan, say)
    except KeyboardInterrupt:
        raise SweepInterrupted(
            f"interrupted; every server this sweep started is stopped (logs in {plan.log_dir})"
        ) from None
    if plot is not None:
        from ..payoff.plot import draw_sweep

        draw_sweep(result, plot)
    judged = result.verdict()
    code = EXIT_OK if judged.verdict in ("pays", "unknown") else EXIT_CHECK_FAILED
    if any(s.failure is not None for s in result.servers.values()):
        code = EXIT_SERVER_NOT_STARTED  # after the report, which names each and its log
    if opts.as_json:
        json_report(code, result.to_dict())
    else:
        for line in sweep.lines(result):
            echo(line)
    sys.exit(code)
