"""The lines the family codemod extends outside the model's code: the interfaces import, a
class's bases and ``from typing import``, each written the way black writes it at vLLM's width
(``LINE``), and an exploded list extended in place so that its comments stay."""

from __future__ import annotations

import libcst as cst

from ..errors import PatchShapeError
from ._cst import dotted, small

ABSOLUTE_INTERFACES = "vllm.model_executor.models.interfaces"
LINE = 88  # the width vLLM's sources are formatted to


# --- text helpers -----------------------------------------------------------------------------


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def sorted_insert(names: list[str], new: str) -> list[str]:
    """``new`` where it sorts when ``names`` are sorted, else at the end."""
    if names == sorted(names):
        return sorted([*names, new])
    return [*names, new]


# --- the interfaces import --------------------------------------------------------------------


def interfaces_import(module: cst.Module, wanted: list[str]) -> tuple[cst.Module, bool]:
    """Add ``wanted`` to ``from .interfaces import ...`` (sorted in, exploded past the width)."""
    body = list(module.body)
    for i, stmt in enumerate(body):
        node = small(stmt)
        if not (
            isinstance(node, cst.ImportFrom)
            and not isinstance(node.names, cst.ImportStar)
            and (
                (len(node.relative) == 1 and dotted(node.module) == "interfaces")
                or (not node.relative and dotted(node.module) == ABSOLUTE_INTERFACES)
            )
        ):
            continue
        source = ".interfaces" if node.relative else ABSOLUTE_INTERFACES
        names = [a.name.value for a in node.names if isinstance(a.name, cst.Name)]
        missing = [n for n in wanted if n not in names]
        if not missing:
            return module, False
        exploded: cst.ImportFrom | None = node
        for n in missing:
            exploded = insert_alias(exploded, n) if exploded is not None else None
        if exploded is not None:  # one name a line: inserted, every comment there kept
            body[i] = stmt.with_changes(body=[exploded])
            return module.with_changes(body=body), True
        # each name as written, ``X as Y`` included, the missing ones sorted in
        entries = [
            (a.name.value if isinstance(a.name, cst.Name) else code(a.name),
             code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)))
            for a in node.names
        ]  # fmt: skip
        for n in missing:
            keys = sorted_insert([k for k, _ in entries], n)
            entries.insert(keys.index(n), (n, n))
        texts = [t for _, t in entries]
        one_line = f"from {source} import {', '.join(texts)}"
        if len(one_line) <= LINE:
            text = one_line + "\n"
        else:
            text = f"from {source} import (\n" + "".join(f"    {t},\n" for t in texts) + ")\n"
        new = cst.parse_statement(text).with_changes(leading_lines=stmt.leading_lines)
        body[i] = new
        return module.with_changes(body=body), True
    raise PatchShapeError("no `from .interfaces import ...` (or its absolute form) to extend")


def insert_alias(node: cst.ImportFrom, name: str) -> cst.ImportFrom | None:
    """An exploded import (one name a line, a trailing comma) with ``name`` inserted where it
    sorts (at the end of an unsorted list), the other names and any comment between them kept
    as they are; None for any other layout."""
    aliases = list(node.names)  # type: ignore[arg-type]  # never an ImportStar here
    seps = [a.comma for a in aliases]
    if not (
        len(aliases) >= 2
        and all(isinstance(c, cst.Comma) for c in seps)
        and all(isinstance(c.whitespace_after, cst.ParenthesizedWhitespace)  # type: ignore[union-attr]
                for c in seps[:-1])
    ):  # fmt: skip
        return None
    first = seps[0]
    assert isinstance(first, cst.Comma) and isinstance(
        first.whitespace_after, cst.ParenthesizedWhitespace
    )
    clean = first.with_changes(
        whitespace_after=first.whitespace_after.with_changes(
            first_line=cst.TrailingWhitespace(), empty_lines=[]
        )
    )
    names = [a.name.value if isinstance(a.name, cst.Name) else "" for a in aliases]
    at = sorted_insert(names, name).index(name)
    if at == len(aliases):  # the last name keeps its own comment; the new one takes the ")" line
        last = aliases[-1].comma
        assert isinstance(last, cst.Comma)
        kept, given = clean, last
        if isinstance(last.whitespace_after, cst.ParenthesizedWhitespace):
            ws, sep = last.whitespace_after, clean.whitespace_after
            assert isinstance(sep, cst.ParenthesizedWhitespace)
            kept = last.with_changes(
                whitespace_after=ws.with_changes(indent=sep.indent, last_line=sep.last_line)
            )
            given = last.with_changes(
                whitespace_after=ws.with_changes(
                    first_line=cst.TrailingWhitespace(), empty_lines=[]
                )
            )
        aliases[-1] = aliases[-1].with_changes(comma=kept)
        aliases.append(cst.ImportAlias(cst.Name(name), comma=given))
    else:
        aliases.insert(at, cst.ImportAlias(cst.Name(name), comma=clean))
    return node.with_changes(names=aliases)


# --- class bases ------------------------------------------------------------------------------


def add_base(cls: cst.ClassDef, base: str) -> cst.ClassDef:
    """``class X(a, b)`` -> ``class X(a, b, base)``, wrapped the way black wraps past the width."""
    if any(arg.keyword is None and dotted(arg.value) == base for arg in cls.bases):
        return cls
    bases = [code(arg.value) for arg in cls.bases if arg.keyword is None]
    if not bases or len(bases) != len(cls.bases):
        raise PatchShapeError(f"class {cls.name.value} has no plain bases to extend")
    bases.append(base)
    one_line = f"class {cls.name.value}({', '.join(bases)}):"
    exploded = isinstance(cls.bases[-1].comma, cst.Comma)  # a trailing comma: one per line
    if len(one_line) <= LINE and not exploded:
        header = one_line
    elif len(f"    {', '.join(bases)}") <= LINE and not exploded:
        header = f"class {cls.name.value}(\n    {', '.join(bases)}\n):"
    else:
        header = f"class {cls.name.value}(\n" + "".join(f"    {b},\n" for b in bases) + "):"
    shell = cst.parse_statement(f"{header}\n    pass\n")
    assert isinstance(shell, cst.ClassDef)
    return cls.with_changes(
        bases=shell.bases,
        lpar=shell.lpar,
        rpar=shell.rpar,
        whitespace_after_class=shell.whitespace_after_class,
        whitespace_after_name=shell.whitespace_after_name,
        whitespace_before_colon=shell.whitespace_before_colon,
    )


def typing_import(module: cst.Module, name: str) -> cst.Module:
    """``name`` added to the module's ``from typing import ...`` (sorted in), or that import
    written before the first import when the module has none."""
    body = list(module.body)
    first_import = None
    for i, stmt in enumerate(body):
        node = small(stmt)
        future = isinstance(node, cst.ImportFrom) and dotted(node.module) == "__future__"
        if isinstance(node, (cst.Import, cst.ImportFrom)) and first_import is None and not future:
            first_import = i
        if not (isinstance(node, cst.ImportFrom) and not node.relative
                and dotted(node.module) == "typing" and not isinstance(node.names, cst.ImportStar)):  # fmt: skip
            continue
        names = [
            a.name.value for a in node.names if isinstance(a.name, cst.Name) and a.asname is None
        ]
        if name in names:
            return module
        text = f"from typing import {', '.join(sorted_insert(names, name))}\n"
        body[i] = cst.parse_statement(text).with_changes(leading_lines=stmt.leading_lines)
        return module.with_changes(body=body)
    if first_import is None:
        raise PatchShapeError(f"no import to put `from typing import {name}` beside")
    new = cst.parse_statement(f"from typing import {name}\n")
    body.insert(first_import, new.with_changes(leading_lines=body[first_import].leading_lines))
    body[first_import + 1] = body[first_import + 1].with_changes(leading_lines=[])
    return module.with_changes(body=body)
