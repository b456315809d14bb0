"""Command line: parse options (click), call one function, render its result as text or JSON.

``main`` is the program: click's root group (``root``) lists every command; ``app`` holds click's
machinery and the application object commands receive, ``base`` what needs no click (options,
display, the one mapping of failures to exit codes), ``streams`` the printing guards, ``options`` the options several commands take (declared once)
and the one parser of number lists, ``outcomes`` the one table from a finished command's outcome to
its exit code. One module per
command, imported when it runs, in a package per group: ``patching/`` (``status``, ``apply``,
``verify``, ``revert``, ``listing``), ``authoring/`` (``capture``, ``importing``, ``port``,
``pin``), ``payoff/`` (``report``, ``bench``, ``sweep``); and ``doctor`` (doctor, serve-args),
``cluster``, ``rehearse``; each renders through ``render/``."""

from __future__ import annotations

from typing import Any


def main(args: list[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
    """Run the command line ``args`` (default: the process's arguments); exits with its code."""
    from .root import main as group

    return group.main(args, prog_name=prog_name, **extra)


__all__ = ["main"]
