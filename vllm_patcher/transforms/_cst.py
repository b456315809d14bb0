"""Small libcst helpers shared by the transforms.

The transforms find their nodes by walking the known structure (module -> class -> method ->
statement) instead of matching every node of the file: ``libcst.matchers`` alone costs about
130 ms to import and a whole-module matcher pass several hundred more, against a parse of 60 ms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import libcst as cst

from ..errors import PatchShapeError

N = TypeVar("N", bound=cst.CSTNode)


def parse(source: str, path: str) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise PatchShapeError(
            f"{path}: not valid Python at line {exc.raw_line}: {exc.message}"
        ) from None


def dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def small(stmt: cst.CSTNode) -> cst.BaseSmallStatement | None:
    """The statement of a one-statement line (``x = 1``), else None."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def assign_target(stmt: cst.CSTNode) -> tuple[str | None, cst.BaseExpression | None]:
    """(dotted target, value) of a single-target assignment line, else (None, None)."""
    node = small(stmt)
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        return dotted(node.targets[0].target), node.value
    return None, None


def body_of(node: cst.CSTNode) -> Sequence[cst.BaseStatement]:
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return body.body
    return ()


def with_body(node: N, statements: Sequence[cst.BaseStatement]) -> N:
    block = getattr(node, "body")  # noqa: B009 - every node passed here has an IndentedBlock body
    assert isinstance(block, cst.IndentedBlock)
    return node.with_changes(body=block.with_changes(body=list(statements)))


def replace_statement(node: N, old: cst.CSTNode, new: cst.CSTNode | Sequence[cst.CSTNode]) -> N:
    """``node`` with the body statement ``old`` replaced by ``new`` (one or several)."""
    out: list[Any] = []
    for stmt in body_of(node):
        if stmt is old:
            out.extend(new if isinstance(new, Sequence) else [new])
        else:
            out.append(stmt)
    return with_body(node, out)


def classes(module: cst.Module) -> Iterator[cst.ClassDef]:
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            yield stmt


def method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    for stmt in body_of(cls):
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def replace_top(module: cst.Module, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module:
    return module.with_changes(body=[new if stmt is old else stmt for stmt in module.body])


class _Collector(cst.CSTVisitor):
    def __init__(self, keep: Callable[[cst.CSTNode], bool]) -> None:
        super().__init__()
        self.keep = keep
        self.found: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.keep(node):
            self.found.append(node)
        return True


def find_all(node: cst.CSTNode, keep: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
    """Every node below ``node`` (inclusive) for which ``keep`` is true. Use on small subtrees."""
    collector = _Collector(keep)
    node.visit(collector)
    return collector.found


def names_used(node: cst.CSTNode, name: str) -> bool:
    return bool(find_all(node, lambda n: isinstance(n, cst.Name) and n.value == name))


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


SPACE_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
