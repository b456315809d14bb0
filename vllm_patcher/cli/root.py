"""The root command group and its options, for click; each command is a module of this package
(grouped in the packages patching, authoring and payoff), registered by name in ``COMMANDS`` (a
new command is one line there). The root group makes the run's application object (``base``), which
every command receives through click's context."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import click

from .app import Group, global_params, pass_app
from .base import Application, root_options

# Each command's module is imported when that command runs (or --help lists them all).
COMMANDS = MappingProxyType(
    {
        "status": ".patching.status:status",
        "apply": ".patching.apply:apply",
        "verify": ".patching.verify:verify",
        "revert": ".patching.revert:revert",
        "list": ".patching.listing:list_",
        "capture": ".authoring.capture:capture",
        "import": ".authoring.importing:import_",
        "port": ".authoring.port:port",
        "pin": ".authoring.pin:pin",
        "doctor": ".doctor:doctor",
        "serve-args": ".doctor:serve_args",
        "cluster": ".cluster:cluster",
        "payoff": ".payoff:payoff",
        "rehearse": ".rehearse:rehearse",
    }
)


@click.group(
    cls=Group,
    params=global_params(),
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="vllm-patcher")
@click.pass_context
@pass_app
def main(
    app: Application,
    ctx: click.Context,
    python: tuple[str, ...],
    directory: tuple[str, ...],
    as_json: bool,
    patch_dirs: tuple[Path, ...],
) -> None:
    """Apply, verify and revert source patches to an installed vLLM: the built-in EAGLE-3 changes
    for DeepSeek-V3, Kimi and every family `vllm-patcher list` names, and patches of your own.

    These options may also follow the command (`vllm-patcher status --json`)."""
    app.command = ctx.invoked_subcommand  # for an error before the command parses its options
    app.given = root_options(python, directory, as_json, patch_dirs)


__all__ = ["main"]
