"""Small libcst helpers shared by the transforms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from ..errors import PatchShapeError


def parse(source: str, path: str) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise PatchShapeError(
            f"{path}: not valid Python at line {exc.raw_line}: {exc.message}"
        ) from None


def append_items(items: Sequence[Any], new: Sequence[Any], default_sep: cst.Comma) -> list[Any]:
    """Append ``new`` to a comma-separated sequence, reusing the separator style already used.

    A single-line sequence keeps ``, `` between items; an exploded one keeps its newline and
    indentation; a trailing comma, when present, stays at the end.
    """
    if not new:
        return list(items)
    if not items:
        raise ValueError("cannot infer separator style of an empty sequence")
    sep = items[-2].comma if len(items) >= 2 else default_sep
    if not isinstance(sep, cst.Comma):
        sep = default_sep
    last_comma = items[-1].comma
    out = list(items[:-1]) + [items[-1].with_changes(comma=sep)]
    for item in new[:-1]:
        out.append(item.with_changes(comma=sep))
    out.append(new[-1].with_changes(comma=last_comma))
    return out


def one_line(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
