"""supports-eagle3: make DeepSeek-V2/V3 (and Kimi-K2.5) real EAGLE-3 targets.

In ``deepseek_v2.py``:

* ``DeepseekV2Model`` gains ``aux_hidden_state_layers`` (empty by default). Its ``forward``
  records, before each decoder layer whose absolute index is in that set, the residual stream
  entering it (``hidden_states + residual``, or ``hidden_states`` alone where ``residual`` is
  still None), and returns ``(hidden_states, aux_hidden_states)`` after the final norm when
  anything was recorded, the plain tensor otherwise.
* ``DeepseekV2ForCausalLM`` lists ``SupportsEagle3`` among its bases and gains
  ``set_aux_hidden_state_layers`` and ``get_eagle3_aux_hidden_state_layers`` (default
  ``(2, n // 2, n - 3)``). Its subclasses (``DeepseekV3ForCausalLM``...) inherit both.

In ``kimi_k25.py``, ``KimiK25ForConditionalGeneration`` lists ``SupportsEagle3`` and hands both
methods to its language model. Releases whose language model is a bare ``DeepseekV2Model``
(0.15.x) get bodies that act on that model directly; later ones delegate to the
``DeepseekV2ForCausalLM`` they hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst
import libcst.matchers as m

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import append_items, parse

PATCH = "supports-eagle3"
INTERFACE = "SupportsEagle3"
SET_METHOD = "set_aux_hidden_state_layers"
GET_METHOD = "get_eagle3_aux_hidden_state_layers"

_SPACE_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
_INTERFACES_IMPORT = m.ImportFrom(
    module=m.OneOf(
        m.Name("interfaces"),
        m.Attribute(
            value=m.Attribute(
                value=m.Attribute(value=m.Name("vllm"), attr=m.Name("model_executor")),
                attr=m.Name("models"),
            ),
            attr=m.Name("interfaces"),
        ),
    )
)


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


_LAYER_LOOP = m.For(
    target=m.Name("layer"),
    iter=m.Call(
        func=m.Name("islice"),
        args=[
            m.Arg(_self_attr("layers")),
            m.Arg(_self_attr("start_layer")),
            m.Arg(_self_attr("end_layer")),
        ],
    ),
)

_CAUSAL_LM_METHODS = f"""\
def {SET_METHOD}(self, layers: tuple[int, ...]) -> None:
    self.model.aux_hidden_state_layers = layers

def {GET_METHOD}(self) -> tuple[int, ...]:
    num_layers = len(self.model.layers)
    return (2, num_layers // 2, num_layers - 3)
"""
_KIMI_DELEGATING_METHODS = f"""\
def {SET_METHOD}(self, layers: tuple[int, ...]) -> None:
    self.language_model.{SET_METHOD}(layers)

def {GET_METHOD}(self) -> tuple[int, ...]:
    return self.language_model.{GET_METHOD}()
"""
# 0.15.x builds Kimi-K2.5's language model as a bare DeepseekV2Model, which has no methods to
# delegate to; act on it the way DeepseekV2ForCausalLM acts on its own ``self.model``.
_KIMI_DIRECT_METHODS = f"""\
def {SET_METHOD}(self, layers: tuple[int, ...]) -> None:
    self.language_model.aux_hidden_state_layers = layers

def {GET_METHOD}(self) -> tuple[int, ...]:
    num_layers = len(self.language_model.layers)
    return (2, num_layers // 2, num_layers - 3)
"""

_LOOP_TEMPLATE = """\
for idx, layer in enumerate(
    LAYERS,
    start=self.start_layer,
):
    if idx in self.aux_hidden_state_layers:
        aux_hidden_states.append(
            hidden_states if residual is None else hidden_states + residual
        )
"""
_RETURN_TEMPLATE = """\
if len(aux_hidden_states) > 0:
    return hidden_states, aux_hidden_states
"""


class _Edits:
    """Counts what a pass found and changed, so a refusal can say which part was missing."""

    def __init__(self) -> None:
        self.changed = False
        self.seen: set[str] = set()


def _methods(template: str) -> list[cst.FunctionDef]:
    module = cst.parse_module(template)
    out = []
    for stmt in module.body:
        assert isinstance(stmt, cst.FunctionDef)
        out.append(stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
    return out


def _find_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def _add_base(cls: cst.ClassDef, edits: _Edits) -> cst.ClassDef:
    if any(m.matches(arg, m.Arg(value=m.Name(INTERFACE), keyword=None)) for arg in cls.bases):
        return cls
    if not cls.bases:
        raise PatchShapeError(f"class {cls.name.value} has no bases to extend")
    edits.changed = True
    bases = append_items(cls.bases, [cst.Arg(cst.Name(INTERFACE))], _SPACE_COMMA)
    return cls.with_changes(bases=bases)


def _add_methods_after_init(cls: cst.ClassDef, template: str, edits: _Edits) -> cst.ClassDef:
    new = [fn for fn in _methods(template) if _find_method(cls, fn.name.value) is None]
    if not new:
        return cls
    body = list(cls.body.body)
    init_at = next(
        (
            i
            for i, stmt in enumerate(body)
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__"
        ),
        None,
    )
    if init_at is None:
        raise PatchShapeError(f"class {cls.name.value} has no __init__")
    edits.changed = True
    body[init_at + 1 : init_at + 1] = new
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _assigns_self_attr(fn: cst.FunctionDef, attr: str, value: Any = None) -> bool:
    target = m.AssignTarget(target=_self_attr(attr))
    pattern = (
        m.Assign(targets=[target]) if value is None else m.Assign(targets=[target], value=value)
    )
    return bool(m.findall(fn, pattern))


def _patch_model_init(fn: cst.FunctionDef, edits: _Edits) -> cst.FunctionDef:
    if _assigns_self_attr(fn, "aux_hidden_state_layers"):
        return fn
    edits.changed = True
    stmt = cst.parse_statement("self.aux_hidden_state_layers = tuple[int, ...]()\n")
    stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    assert isinstance(fn.body, cst.IndentedBlock)
    return fn.with_changes(body=fn.body.with_changes(body=[*fn.body.body, stmt]))


def _patch_model_forward(fn: cst.FunctionDef, edits: _Edits) -> cst.FunctionDef:
    if m.findall(fn, m.Name("aux_hidden_states")):
        return fn
    assert isinstance(fn.body, cst.IndentedBlock)
    body: list[cst.BaseStatement] = list(fn.body.body)
    loops = [i for i, stmt in enumerate(body) if m.matches(stmt, _LAYER_LOOP)]
    if len(loops) != 1:
        raise PatchShapeError(
            "DeepseekV2Model.forward: expected one top-level "
            "`for layer in islice(self.layers, self.start_layer, self.end_layer)` loop, "
            f"found {len(loops)}"
        )
    last = body[-1]
    if not m.matches(last, m.SimpleStatementLine(body=[m.Return(value=m.Name("hidden_states"))])):
        raise PatchShapeError("DeepseekV2Model.forward does not end with `return hidden_states`")
    loop = body[loops[0]]
    assert isinstance(loop, cst.For)
    if m.findall(loop.body, m.Name("idx")):
        raise PatchShapeError(
            "DeepseekV2Model.forward already uses the name `idx` in its layer loop"
        )

    template = cst.parse_statement(_LOOP_TEMPLATE)
    assert isinstance(template, cst.For) and isinstance(template.iter, cst.Call)
    enumerate_args = list(template.iter.args)
    enumerate_args[0] = enumerate_args[0].with_changes(value=loop.iter)
    new_iter = template.iter.with_changes(args=enumerate_args)
    assert isinstance(loop.body, cst.IndentedBlock)
    new_loop = loop.with_changes(
        target=template.target,
        iter=new_iter,
        whitespace_after_in=template.whitespace_after_in,
        body=loop.body.with_changes(body=[*template.body.body, *loop.body.body]),
        leading_lines=[],
    )
    collect = cst.parse_statement("aux_hidden_states = []\n").with_changes(
        leading_lines=loop.leading_lines
    )
    assert isinstance(last, cst.SimpleStatementLine)
    guard = cst.parse_statement(_RETURN_TEMPLATE).with_changes(leading_lines=last.leading_lines)
    plain_return = last.with_changes(leading_lines=[])

    i = loops[0]
    body = [*body[:i], collect, new_loop, *body[i + 1 : -1], guard, plain_return]
    edits.changed = True
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _patch_class_method(
    cls: cst.ClassDef, name: str, patcher: object, edits: _Edits
) -> cst.ClassDef:
    fn = _find_method(cls, name)
    if fn is None:
        raise PatchShapeError(f"class {cls.name.value} has no method {name}")
    assert callable(patcher)
    new_fn = patcher(fn, edits)
    body = [new_fn if stmt is fn else stmt for stmt in cls.body.body]
    return cls.with_changes(body=cls.body.with_changes(body=body))


class _SupportsEagle3Transformer(m.MatcherDecoratableTransformer):
    def __init__(self, classes: Sequence[str], module_label: str) -> None:
        super().__init__()
        self.edits = _Edits()
        self.classes = classes
        self.module_label = module_label
        self.import_seen = False

    @m.leave(_INTERFACES_IMPORT)
    def add_import(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        if isinstance(updated.names, cst.ImportStar):
            return updated
        names = list(updated.names)
        if not any(m.matches(a, m.ImportAlias(name=m.Name("SupportsPP"))) for a in names):
            return updated
        self.import_seen = True
        if any(m.matches(a, m.ImportAlias(name=m.Name(INTERFACE))) for a in names):
            return updated
        self.edits.changed = True
        new_names = append_items(names, [cst.ImportAlias(cst.Name(INTERFACE))], _SPACE_COMMA)
        return updated.with_changes(names=new_names)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        name = updated.name.value
        if name not in self.classes:
            return updated
        self.edits.seen.add(name)
        if name == "DeepseekV2Model":
            updated = _patch_class_method(updated, "__init__", _patch_model_init, self.edits)
            return _patch_class_method(updated, "forward", _patch_model_forward, self.edits)
        init = _find_method(updated, "__init__")
        if init is None:
            raise PatchShapeError(f"{self.module_label}: class {name} has no __init__")
        updated = _add_base(updated, self.edits)
        if name == "DeepseekV2ForCausalLM":
            if not _assigns_self_attr(init, "model"):
                raise PatchShapeError(f"{self.module_label}: {name}.__init__ never sets self.model")
            return _add_methods_after_init(updated, _CAUSAL_LM_METHODS, self.edits)
        if not _assigns_self_attr(init, "language_model"):
            raise PatchShapeError(
                f"{self.module_label}: {name}.__init__ never sets self.language_model"
            )
        bare = _assigns_self_attr(init, "language_model", m.Call(func=m.Name("DeepseekV2Model")))
        template = _KIMI_DIRECT_METHODS if bare else _KIMI_DELEGATING_METHODS
        return _add_methods_after_init(updated, template, self.edits)


def _run(source: str, path: str, classes: Sequence[str]) -> Rewrite:
    module = parse(source, path)
    transformer = _SupportsEagle3Transformer(classes, path)
    try:
        new = module.visit(transformer)
    except PatchShapeError as exc:
        if exc.message.startswith(path):
            raise
        raise PatchShapeError(f"{path}: {exc.message}") from None
    missing = [c for c in classes if c not in transformer.edits.seen]
    if missing:
        raise PatchShapeError(f"{path}: class {', '.join(missing)} not found")
    if not transformer.import_seen:
        raise PatchShapeError(f"{path}: no `from ...interfaces import ..., SupportsPP` to extend")
    return Rewrite(new.code, changed=transformer.edits.changed)


def rewrite_deepseek(
    source: str, path: str = "vllm/model_executor/models/deepseek_v2.py"
) -> Rewrite:
    return _run(source, path, ("DeepseekV2Model", "DeepseekV2ForCausalLM"))


def rewrite_kimi(source: str, path: str = "vllm/model_executor/models/kimi_k25.py") -> Rewrite:
    return _run(source, path, ("KimiK25ForConditionalGeneration",))
