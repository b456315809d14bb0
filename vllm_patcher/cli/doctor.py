"""doctor and serve-args: the drafter checked against the target model for a release."""

from __future__ import annotations

import shlex
from typing import Any

import click

from .. import doctor as doctor_mod
from ..errors import ServeRefused, TargetNotFound
from ..findings import OK, PROBLEM, Finding
from .app import Command, pass_app
from .base import Application, Options
from .render import models as render

_VLLM_VERSION_OPTION = click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    default=None,
    help="Judge for this vLLM release instead of the installed one (no vLLM needed).",
)
_MAX_MODEL_LEN_OPTION = click.option(
    "--max-model-len",
    "served_len",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The context the server will run with (vllm serve --max-model-len): the drafter's "
    "positions are judged against it instead of the target's.",
)
_PIPELINE_OPTION = click.option(
    "--pipeline-parallel-size",
    "pipeline",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The server's pipeline parallelism (vllm serve --pipeline-parallel-size): above 1, "
    "doctor says whether the release carries the drafter's aux layers across stages.",
)
_TENSOR_OPTION = click.option(
    "--tensor-parallel-size",
    "tensor",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The server's tensor parallelism (vllm serve --tensor-parallel-size): the KV heads a "
    "GPU holds, for a hybrid target's KV page (1 when not given).",
)
_MODEL_HELP = "Target model: a directory, or a Hugging Face repo id found in the local cache."
_DRAFTER_HELP = "EAGLE-3 drafter: a directory, or a Hugging Face repo id found in the local cache."


NOT_CHECKED = (
    "venv: not checked: --vllm-version judges the release, not a venv's files; give --python V "
    "(without --vllm-version) to judge the venv that will serve"
)


def venv_finding(opts: Options, model_dir: str, report: Any) -> Finding | None:
    """Whether the venv doctor judges (the installed vLLM) has the patches this target needs on
    its release: a problem naming the apply that fixes it, or an ok line saying so."""
    from ..catalogue.targets import family_of
    from ..patching import status as status_mod
    from ..patching.states import READY, PatchState

    t = report.target
    if t is None:
        return None
    catalogue = opts.whole()
    family = family_of((t.model_type, t.text_model_type), catalogue)
    if family is None:
        return None
    target = opts.target()
    st = status_mod.read_status(target, catalogue.select(family.patches))
    mine = [p for p in st.patches if p.name in family.patches]
    where = target.python if target.python is not None else target.site_packages
    failing = [p for p in mine if p.state not in READY]
    if not failing:
        said = ", ".join(f"{p.name} {p.state.value}" for p in mine)
        return Finding("venv", OK, f"{where} has what a {family.name} target needs: {said}")
    said = ", ".join(f"{p.name} {p.state.value}" for p in failing)
    apply = target.command(f"apply --model {shlex.quote(model_dir)}")
    if any(p.state is PatchState.DRIFTED for p in failing):  # apply refuses such a file
        why = "a file it changes is not as apply left it or pip installed it (edited?)"
        fix = f"{target.command('revert --force')} (your copy is kept), then {apply}"
    elif all(p.state is PatchState.OUTDATED for p in failing):
        why = "it holds an earlier version of the patches (the apply below brings this one's)"
        fix = apply
    else:
        why, fix = "its vLLM would refuse the EAGLE-3 drafter after the load", apply
    return Finding(
        "venv",
        PROBLEM,
        f"{where} lacks what a {family.name} target needs on vLLM {target.version} ({said}): {why}",
        fix,
    )


def _doctor_release(opts: Options, vllm_version: str | None) -> str:
    """The release doctor judges for: --vllm-version, else the installed vLLM's."""
    if vllm_version is not None:
        return vllm_version
    try:
        return opts.target().version
    except TargetNotFound as exc:
        raise TargetNotFound(f"{exc.message}; or name the release with --vllm-version") from None


@click.command(cls=Command)
@click.option("--model", "model_dir", required=True, metavar="DIR|REPO", help=_MODEL_HELP)
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR|REPO", help=_DRAFTER_HELP)
@_VLLM_VERSION_OPTION
@_MAX_MODEL_LEN_OPTION
@_PIPELINE_OPTION
@_TENSOR_OPTION
@click.option(
    "--fix",
    is_flag=True,
    help="Write the top-level aux-layer key the drafter needs (config.json backed up first).",
)
@pass_app
def doctor(
    app: Application,
    model_dir: str,
    drafter_dir: str,
    vllm_version: str | None,
    served_len: int | None,
    pipeline: int | None,
    tensor: int | None,
    fix: bool,
) -> None:
    """Preflight: check the drafter against the target for this vLLM release, before any load."""
    opts = app.options
    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)  # a usage error before any file is read
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.run(
        model_dir,
        drafter_dir,
        release,
        fix=fix,
        python=opts.hub_python,
        catalogue=opts.catalogue(),
        served_len=served_len,
        pipeline=pipeline,
        tensor=tensor,
    )
    venv = None if vllm_version is not None else venv_finding(opts, model_dir, report)
    if venv is not None:
        report.findings.append(venv)
    note = NOT_CHECKED if vllm_version is not None and report.target is not None else None
    app.show(render.doctor(report, fix, note))


@click.command("serve-args", cls=Command)
@click.option(
    "--model",
    "model_dir",
    required=True,
    metavar="DIR|REPO",
    help=_MODEL_HELP + " Doctor's checks run against it first.",
)
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR|REPO", help=_DRAFTER_HELP)
@_VLLM_VERSION_OPTION
@_MAX_MODEL_LEN_OPTION
@click.option(
    "--num-speculative-tokens",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Draft tokens proposed per step.",
)
@_TENSOR_OPTION
@pass_app
def serve_args(
    app: Application,
    model_dir: str,
    drafter_dir: str,
    vllm_version: str | None,
    served_len: int | None,
    num_speculative_tokens: int,
    tensor: int | None,
) -> None:
    """Run doctor's checks, then print the JSON for vllm serve --speculative-config.

    stdout is that one line and nothing else, with or without --json (it is vLLM's input, not a
    report); a problem refuses with exit 1, the problems on stderr.
    """
    opts = app.options
    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.check(
        model_dir,
        drafter_dir,
        release,
        python=opts.hub_python,
        catalogue=opts.catalogue(),
        served_len=served_len,
        tensor=tensor,
    )
    venv = None if vllm_version is not None else venv_finding(opts, model_dir, report)
    if venv is not None:
        report.findings.append(venv)
    elif vllm_version is not None and not opts.as_json:
        app.echo(f"vllm-patcher: note: {NOT_CHECKED}", err=True)
    if not report.ok:
        app.display(render.serve_args_problems(report))
        args = (
            f"doctor --model {shlex.quote(model_dir)} --drafter {shlex.quote(drafter_dir)}"
            f"{f' --vllm-version {vllm_version}' if vllm_version else ''}"
            f"{f' --max-model-len {served_len}' if served_len else ''}"
            f"{f' --tensor-parallel-size {tensor}' if tensor else ''}"
        )  # on the venv serve-args judged (its --python or --target), or on none
        doctor = f"vllm-patcher {args}" if vllm_version else opts.target().command(args)
        raise ServeRefused(
            f"serve-args: doctor found {len(report.problems)} problem"
            f"{'s' * (len(report.problems) != 1)} (above); nothing printed for "
            f"--speculative-config ({doctor} shows the whole report)"
        )
    assert report.drafter_source is not None
    app.display(render.serve_args_faults(report))
    app.show(
        render.serve_args(
            doctor_mod.speculative_config(report.drafter_source, num_speculative_tokens)
        )
    )
