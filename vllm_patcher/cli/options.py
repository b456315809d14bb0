"""Options more than one command takes, declared once (pip's ``cli/cmdoptions.py`` is the model),
with their rules (a refusal is a usage error, exit 2, in one line), and the one parser of a
comma-separated list of whole numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..errors import BadSetting


def integers(option: str, value: str, example: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``; a usage error naming ``option`` for anything else, or for
    no value at all."""
    try:
        values = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise BadSetting(f"{option} {value!r}: give integers like {example}") from None
    if not values:
        raise BadSetting(f"{option}: give at least one value, like {example}")
    return values


F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]


def _concurrencies(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    levels = integers("--concurrency", value, "1,4,16")
    if any(c < 1 for c in levels):
        raise BadSetting("--concurrency takes positive integers, e.g. 1,4,16")
    return levels


concurrency: Decorator[Any] = click.option(
    "--concurrency",
    default="1,4,16",
    show_default=True,
    callback=_concurrencies,
    help="Comma-separated concurrencies.",
)
dataset: Decorator[Any] = click.option(
    "--dataset", default="random", show_default=True, help="vllm bench serve's dataset."
)
plot: Decorator[Any] = click.option(
    "--plot", type=click.Path(path_type=Path), metavar="FILE.png", help="Draw it."
)


def num_prompts(help: str | None = None) -> Decorator[Any]:
    return click.option("--num-prompts", default=64, show_default=True, type=int, help=help)


def repeat(what: str) -> Decorator[Any]:
    def runs(ctx: click.Context, param: click.Parameter, value: int) -> int:
        if value < 1:
            raise BadSetting(f"--repeat {value}: give 1 or more runs per {what}")
        return value

    return click.option(
        "--repeat",
        default=2,
        show_default=True,
        type=int,
        callback=runs,
        help=f"Runs per {what}: a verdict only where every run's figures fall in one class.",
    )


def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise BadSetting("--ready-timeout takes a finite number of seconds above 0")
    return value


def ready_timeout(help: str) -> Decorator[Any]:
    return click.option(
        "--ready-timeout",
        default=1800.0,
        show_default=True,
        type=float,
        callback=_seconds,
        help=help,
    )
