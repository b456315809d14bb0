"""Command line: parse options (click), call one function, render its result as text or JSON.

``main`` is the program: click's root group (``root``); each command group is a module of this
package, imported when its command runs."""

from __future__ import annotations

from typing import Any


def main(args: list[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
    """Run the command line ``args`` (default: the process's arguments); exits with its code."""
    from .root import main as group

    return group.main(args, prog_name=prog_name, **extra)


__all__ = ["main"]
