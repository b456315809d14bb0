"""Options more than one command takes, declared once (pip's ``cli/cmdoptions.py`` is the model),
and the one parser of a comma-separated list of whole numbers."""

from __future__ import annotations

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

concurrency: Decorator[Any] = click.option(
    "--concurrency", default="1,4,16", show_default=True, help="Comma-separated concurrencies."
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
    return click.option(
        "--repeat",
        default=2,
        show_default=True,
        type=int,
        help=f"Runs per {what}: a verdict only where every run's figures fall in one class.",
    )


def ready_timeout(help: str) -> Decorator[Any]:
    return click.option("--ready-timeout", default=1800.0, show_default=True, type=float, help=help)
