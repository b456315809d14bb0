"""``rehearse``: your own ``vllm serve`` with dummy weights, before the real load."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from ..errors import BadSetting, RehearsalInterrupted
from . import options
from .app import ServeCommand, pass_app
from .base import Application
from .render import rehearse as render


@click.command("rehearse", cls=ServeCommand)
@options.ready_timeout(
    "Seconds the server may take to become ready (no checkpoint is read; torch.compile, "
    "graph capture and the KV cache are)."
)
@click.option(
    "--real-drafter",
    is_flag=True,
    help="Load the drafter's own weights (small next to the target), so its checkpoint's names "
    "and shapes are proven too (vLLM 0.17.1 and newer: SpeculativeConfig.draft_load_config).",
)
@click.option(
    "--log",
    "log",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Keep the server's log here (default: a temp file, kept only when the rehearsal fails).",
)
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED, metavar="-- SERVE_ARGS...")
@pass_app
def rehearse(
    app: Application,
    ready_timeout: float,
    real_drafter: bool,
    log: Path | None,
    serve_args: tuple[str, ...],
) -> None:
    """Start your own `vllm serve` (the arguments after `--`, model first) with `--load-format
    dummy`: the real model classes with random weights, no checkpoint read. Waits until it is
    ready, asks a few completions, reads /metrics for drafts, stops it and every process it
    started. Reports each step reached and its time, the classes vLLM resolved, and on a failure
    its cause and fix."""
    from ..doctor.checks import serve_pipeline_refusal
    from ..rehearse import run as rehearsal
    from ..serving.args import parse

    opts = app.options
    args = parse(serve_args)
    target = opts.vllm_target("rehearse starts vLLM")  # one locate for the whole run
    refused = serve_pipeline_refusal(args, target.version)
    if refused is not None:
        raise BadSetting(refused)
    python = str(target.python)
    loadable = real_drafter and rehearsal.has_draft_load_config(target.site_packages)
    apply = target.command("apply")
    plan = rehearsal.plan(args, real_drafter, loadable, ready_timeout, log, apply)
    known = rehearsal.known_faults(plan, target.version)
    plan = dataclasses.replace(plan, known_faults=tuple(f.key for f in known))
    from ..rehearse.device import require_device

    require_device(python)  # no device: one line and exit 24, before any server starts
    from .render.events import rehearse_line

    say = (
        None
        if opts.as_json
        else (lambda note: app.echo(f"rehearse: {rehearse_line(note)}", err=True))
    )
    if not opts.as_json:
        for line in render.opening(plan, known):
            app.echo(f"rehearse: {line}", err=True)
    try:
        result = rehearsal.rehearse(python, plan, say)
    except KeyboardInterrupt:
        raise RehearsalInterrupted(
            "interrupted; the server and every process it started are stopped, and the "
            "rehearsal's files removed"
        ) from None
    app.show(render.rehearsal(result))
