"""``payoff``: the group, a command per file: ``report`` (payoff URL, the default), ``bench``
(payoff bench) and ``sweep`` (payoff sweep); all text through ``render/``."""

from __future__ import annotations

import click

from ...errors import BadSetting
from ..app import SubGroup


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


def _register() -> None:
    from .bench import payoff_bench
    from .report import payoff_report
    from .sweep import payoff_sweep

    for command in (payoff_report, payoff_bench, payoff_sweep):
        payoff.add_command(command)


_register()
