"""Command line: parse options, call one function, render its result as text or JSON.

``main`` is the program. A plain status, apply or revert runs without importing click
(``fast``); every other command line goes to click's root group (``root``)."""

from __future__ import annotations

import os
import sys
from typing import Any


def main(args: list[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
    """Run the command line ``args`` (default: ``sys.argv[1:]``); exits with its code."""
    argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
    # click's own settings (standalone_mode, ...) and its shell completion are click's to honour
    if not extra and "_VLLM_PATCHER_COMPLETE" not in os.environ:
        from .fast import parse, run

        parsed = parse(argv)
        if parsed is not None:
            run(argv, parsed)
    from .root import main as group

    return group.main(args, prog_name=prog_name, **extra)


__all__ = ["main"]
