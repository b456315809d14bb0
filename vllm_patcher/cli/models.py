"""doctor and serve-args: the drafter checked against the target model for a release."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .. import doctor as doctor_mod
from ..errors import (
    EXIT_CHECK_FAILED,
    ServeRefused,
    TargetNotFound,
)
from ..install import locate as locate_mod
from .app import Command, json_report
from .base import Options, echo

_VLLM_VERSION_OPTION = click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    default=None,
    help="Judge for this vLLM release instead of the installed one (no vLLM needed).",
)
_MODEL_HELP = "Target model: a directory, or a Hugging Face repo id found in the local cache."
_DRAFTER_HELP = "EAGLE-3 drafter: a directory, or a Hugging Face repo id found in the local cache."


def _doctor_release(opts: Options, vllm_version: str | None) -> str:
    """The release doctor judges for: --vllm-version, else the installed vLLM's."""
    if vllm_version is not None:
        return vllm_version
    try:
        return opts.target().version
    except TargetNotFound as exc:
        raise TargetNotFound(f"{exc.message}; or name the release with --vllm-version") from None


def _doctor_lines(report: Any, fix: bool) -> list[str]:
    lines: list[str] = []
    if report.fix is not None:
        lines.append(f"--fix wrote to {report.fix.config} (original kept as {report.fix.backup}):")
        lines.extend(f"  {value.describe()}" for value in report.fix.values)
        lines.append("checked again:")
    elif fix:
        lines.append("--fix: nothing it can write; see the fixes below")
    t, d, aux = report.target, report.drafter, report.aux
    if t is not None and d is not None and aux is not None:
        lines.append(
            f"vLLM {report.vllm_version}, target {_model_name(report.model_source, t.path)} "
            f"({t.model_type}, {t.num_layers} layers), drafter {_model_name(report.drafter_source, d.path)}"
        )
        lines.append(
            f"aux layers: vLLM {list(aux.vllm_ids)} (residual entering layer i) = SGLang/SpecForge "
            f"{list(aux.output_ids)} (output of layer i), from {aux.source}"
        )
    else:
        lines.append(f"vLLM {report.vllm_version}")
    for f in report.findings:
        lines.append(f"  {f.level:<8} {f.check:<13} {f.message}")
        if f.fix and f.level != doctor_mod.OK:
            lines.append(f"  {'':<8} {'':<13} fix: {f.fix}")
    problems, warnings = len(report.problems), len(report.warnings)
    lines.append(
        f"doctor: {problems} problem{'s' * (problems != 1)}, "
        f"{warnings} warning{'s' * (warnings != 1)}"
    )
    return lines


def _model_name(source: Any, path: str) -> str:
    """A repo id as the user gave it, with the snapshot folder it was read from."""
    if source is not None and source.repo_id:
        return f"{source.repo_id} ({path})"
    return path


@click.command(cls=Command)
@click.option("--model", "model_dir", required=True, metavar="DIR|REPO", help=_MODEL_HELP)
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR|REPO", help=_DRAFTER_HELP)
@_VLLM_VERSION_OPTION
@click.option(
    "--fix",
    is_flag=True,
    help="Write the top-level aux-layer key the drafter needs (config.json backed up first).",
)
@click.pass_obj
def doctor(
    opts: Options, model_dir: str, drafter_dir: str, vllm_version: str | None, fix: bool
) -> None:
    """Preflight: check the drafter against the target for this vLLM release, before any load."""
    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)  # a usage error before any file is read
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.run(
        model_dir,
        drafter_dir,
        release,
        fix=fix,
        python=lambda: locate_mod.hub_python(opts.python, opts.directory),
    )
    if opts.as_json:
        json_report(0 if report.ok else EXIT_CHECK_FAILED, report.to_dict())
    else:
        for line in _doctor_lines(report, fix):
            echo(line)
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


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
@click.option(
    "--num-speculative-tokens",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Draft tokens proposed per step.",
)
@click.pass_obj
def serve_args(
    opts: Options,
    model_dir: str,
    drafter_dir: str,
    vllm_version: str | None,
    num_speculative_tokens: int,
) -> None:
    """Run doctor's checks, then print the JSON for vllm serve --speculative-config.

    stdout is that one line and nothing else, with or without --json (it is vLLM's input, not a
    report); a problem refuses with exit 1, the problems on stderr.
    """
    if vllm_version is not None:
        doctor_mod.release_version(vllm_version)
    release = _doctor_release(opts, vllm_version)
    report = doctor_mod.check(
        model_dir,
        drafter_dir,
        release,
        python=lambda: locate_mod.hub_python(opts.python, opts.directory),
    )
    if not report.ok:
        for f in report.problems:
            echo(f"vllm-patcher: problem: {f.check}: {f.message}", err=True)
            if f.fix:
                echo(f"vllm-patcher:   fix: {f.fix}", err=True)
        raise ServeRefused(
            f"serve-args: doctor found {len(report.problems)} problem"
            f"{'s' * (len(report.problems) != 1)} (above); nothing printed for "
            f"--speculative-config (vllm-patcher doctor --model {model_dir} --drafter "
            f"{drafter_dir}{f' --vllm-version {vllm_version}' if vllm_version else ''} shows the "
            "whole report)"
        )
    assert report.drafter_source is not None
    echo(json.dumps(doctor_mod.speculative_config(report.drafter_source, num_speculative_tokens)))
