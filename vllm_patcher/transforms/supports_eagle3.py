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

import libcst as cst

from ..errors import PatchShapeError
from . import Rewrite
from ._cst import (
    SPACE_COMMA,
    append_items,
    body_of,
    dotted,
    find_all,
    method,
    names_used,
    parse,
    small,
    with_body,
)
from ._cst import replace_statement as replace_in

PATCH = "supports-eagle3"
INTERFACE = "SupportsEagle3"
SET_METHOD = "set_aux_hidden_state_layers"
GET_METHOD = "get_eagle3_aux_hidden_state_layers"
INTERFACES_MODULES = ("interfaces", "vllm.model_executor.models.interfaces")

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


def _methods(template: str) -> list[cst.FunctionDef]:
    out = []
    for stmt in cst.parse_module(template).body:
        assert isinstance(stmt, cst.FunctionDef)
        out.append(stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
    return out


def _add_import(module: cst.Module) -> tuple[cst.Module, bool, bool]:
    """Add SupportsEagle3 to the ``from ...interfaces import ..., SupportsPP`` line."""
    body = list(module.body)
    for i, stmt in enumerate(body):
        node = small(stmt)
        if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
            continue
        relative = len(node.relative)
        name = dotted(node.module)
        if not (
            (relative == 1 and name == "interfaces")
            or (relative == 0 and name in INTERFACES_MODULES[1:])
        ):
            continue
        names = [alias.name.value for alias in node.names if isinstance(alias.name, cst.Name)]
        if "SupportsPP" not in names:
            continue
        if INTERFACE in names:
            return module, True, False
        aliases = append_items(node.names, [cst.ImportAlias(cst.Name(INTERFACE))], SPACE_COMMA)
        assert isinstance(stmt, cst.SimpleStatementLine)
        body[i] = stmt.with_changes(body=[node.with_changes(names=aliases)])
        return module.with_changes(body=body), True, True
    return module, False, False


def _add_base(cls: cst.ClassDef) -> tuple[cst.ClassDef, bool]:
    if any(arg.keyword is None and dotted(arg.value) == INTERFACE for arg in cls.bases):
        return cls, False
    if not cls.bases:
        raise PatchShapeError(f"class {cls.name.value} has no bases to extend")
    return cls.with_changes(
        bases=append_items(cls.bases, [cst.Arg(cst.Name(INTERFACE))], SPACE_COMMA)
    ), True


def _add_methods_after_init(cls: cst.ClassDef, template: str) -> tuple[cst.ClassDef, bool]:
    new = [fn for fn in _methods(template) if method(cls, fn.name.value) is None]
    init = method(cls, "__init__")
    if init is None:
        raise PatchShapeError(f"class {cls.name.value} has no __init__")
    if not new:
        return cls, False
    return replace_in(cls, init, [init, *new]), True


def _self_assignments(fn: cst.FunctionDef, attr: str) -> list[cst.Assign]:
    """Assignments to ``self.<attr>`` anywhere in ``fn`` (some sit inside ``with`` blocks)."""
    found = find_all(
        fn,
        lambda n: (
            isinstance(n, cst.Assign) and any(dotted(t.target) == f"self.{attr}" for t in n.targets)
        ),
    )
    return [n for n in found if isinstance(n, cst.Assign)]


def _patch_model_init(fn: cst.FunctionDef) -> tuple[cst.FunctionDef, bool]:
    if _self_assignments(fn, "aux_hidden_state_layers"):
        return fn, False
    stmt = cst.parse_statement("self.aux_hidden_state_layers = tuple[int, ...]()\n")
    stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    return with_body(fn, [*body_of(fn), stmt]), True


def _is_layer_loop(stmt: cst.CSTNode) -> bool:
    if not (isinstance(stmt, cst.For) and dotted(stmt.target) == "layer"):
        return False
    call = stmt.iter
    return (
        isinstance(call, cst.Call)
        and dotted(call.func) == "islice"
        and [dotted(a.value) for a in call.args]
        == ["self.layers", "self.start_layer", "self.end_layer"]
    )


def _patch_model_forward(fn: cst.FunctionDef) -> tuple[cst.FunctionDef, bool]:
    if names_used(fn, "aux_hidden_states"):
        return fn, False
    body: list[cst.BaseStatement] = list(body_of(fn))
    loops = [i for i, stmt in enumerate(body) if _is_layer_loop(stmt)]
    if len(loops) != 1:
        raise PatchShapeError(
            "DeepseekV2Model.forward: expected one top-level "
            "`for layer in islice(self.layers, self.start_layer, self.end_layer)` loop, "
            f"found {len(loops)}"
        )
    last = body[-1]
    ret = small(last)
    if not (isinstance(ret, cst.Return) and dotted(ret.value) == "hidden_states"):
        raise PatchShapeError("DeepseekV2Model.forward does not end with `return hidden_states`")
    assert isinstance(last, cst.SimpleStatementLine)
    loop = body[loops[0]]
    assert isinstance(loop, cst.For)
    if names_used(loop.body, "idx"):
        raise PatchShapeError(
            "DeepseekV2Model.forward already uses the name `idx` in its layer loop"
        )

    template = cst.parse_statement(_LOOP_TEMPLATE)
    assert isinstance(template, cst.For) and isinstance(template.iter, cst.Call)
    enumerate_args = list(template.iter.args)
    enumerate_args[0] = enumerate_args[0].with_changes(value=loop.iter)
    new_loop = with_body(
        loop.with_changes(
            target=template.target,
            iter=template.iter.with_changes(args=enumerate_args),
            whitespace_after_in=template.whitespace_after_in,
            leading_lines=[],
        ),
        [*body_of(template), *body_of(loop)],
    )
    collect = cst.parse_statement("aux_hidden_states = []\n").with_changes(
        leading_lines=loop.leading_lines
    )
    guard = cst.parse_statement(_RETURN_TEMPLATE).with_changes(leading_lines=last.leading_lines)
    i = loops[0]
    body = [
        *body[:i],
        collect,
        new_loop,
        *body[i + 1 : -1],
        guard,
        last.with_changes(leading_lines=[]),
    ]
    return with_body(fn, body), True


def _patch_method(cls: cst.ClassDef, name: str, patcher) -> tuple[cst.ClassDef, bool]:  # type: ignore[no-untyped-def]
    fn = method(cls, name)
    if fn is None:
        raise PatchShapeError(f"class {cls.name.value} has no method {name}")
    new_fn, changed = patcher(fn)
    return (replace_in(cls, fn, new_fn), True) if changed else (cls, False)


def _patch_class(cls: cst.ClassDef) -> tuple[cst.ClassDef, bool]:
    name = cls.name.value
    if name == "DeepseekV2Model":
        cls, a = _patch_method(cls, "__init__", _patch_model_init)
        cls, b = _patch_method(cls, "forward", _patch_model_forward)
        return cls, a or b
    init = method(cls, "__init__")
    if init is None:
        raise PatchShapeError(f"class {name} has no __init__")
    cls, based = _add_base(cls)
    if name == "DeepseekV2ForCausalLM":
        if not _self_assignments(init, "model"):
            raise PatchShapeError(f"{name}.__init__ never sets self.model")
        cls, added = _add_methods_after_init(cls, _CAUSAL_LM_METHODS)
        return cls, based or added
    language_model = _self_assignments(init, "language_model")
    if not language_model:
        raise PatchShapeError(f"{name}.__init__ never sets self.language_model")
    bare = any(
        isinstance(a.value, cst.Call) and dotted(a.value.func) == "DeepseekV2Model"
        for a in language_model
    )
    cls, added = _add_methods_after_init(
        cls, _KIMI_DIRECT_METHODS if bare else _KIMI_DELEGATING_METHODS
    )
    return cls, based or added


def _run(source: str, path: str, class_names: Sequence[str]) -> Rewrite:
    module = parse(source, path)
    try:
        module, import_seen, changed = _add_import(module)
        if not import_seen:
            raise PatchShapeError("no `from ...interfaces import ..., SupportsPP` to extend")
        body = list(module.body)
        seen = set()
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.ClassDef) and stmt.name.value in class_names:
                seen.add(stmt.name.value)
                body[i], patched = _patch_class(stmt)
                changed = changed or patched
        missing = [c for c in class_names if c not in seen]
        if missing:
            raise PatchShapeError(f"class {', '.join(missing)} not found")
    except PatchShapeError as exc:
        raise PatchShapeError(f"{path}: {exc.message}") from None
    if not changed:
        return Rewrite(source, changed=False)
    return Rewrite(module.with_changes(body=body).code, changed=True)


def rewrite_deepseek(
    source: str, path: str = "vllm/model_executor/models/deepseek_v2.py"
) -> Rewrite:
    return _run(source, path, ("DeepseekV2Model", "DeepseekV2ForCausalLM"))


def rewrite_kimi(source: str, path: str = "vllm/model_executor/models/kimi_k25.py") -> Rewrite:
    return _run(source, path, ("KimiK25ForConditionalGeneration",))
