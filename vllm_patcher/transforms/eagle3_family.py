"""eagle3_family: make one model family's vLLM model file an EAGLE-3 target, from its description.

The family is data (``[family]`` in its ``patch.toml``, read by ``catalogue/family.py``); this
codemod writes, for each ``[[family.model]]`` file, what upstream writes when it gives a family
EAGLE-3, in the shape of the release's generation:

* A (before 0.18.0): the inner model gets ``aux_hidden_state_layers`` (empty) in ``__init__``; its
  forward records, before each layer whose index is asked for, the residual stream entering it;
  the causal LM gets ``set_aux_hidden_state_layers`` and ``get_eagle3_aux_hidden_state_layers``
  (default ``(2, n // 2, n - 3)``).
* B (0.18.0 on): the inner model lists ``EagleModelMixin`` and calls ``_maybe_add_hidden_state``
  at 0 and at ``idx + 1`` after each layer; the interface's own methods serve the causal LM.

Either way the forward returns ``(hidden_states, aux_hidden_states)`` after the final norm when
anything was recorded, the causal LM lists ``SupportsEagle3``, and the forward's return annotation
says so. The family's parameters: ``capture`` (``stream``: ``hidden_states + residual``, the
residual still None before the first layer; ``hidden``: the layer adds its own residual, so the
hidden state is the stream), ``index`` (``relative``, upstream's, or ``absolute`` from
``self.start_layer``), ``inner`` (the causal LM's attribute, or path, holding the inner model)
``interface`` (false: the causal LM inherits the interface, only the model is rewritten) and
``model_file`` (the inner model is another entry's, in that file: only the causal LM is
rewritten here, as for a multimodal wrapper around a text model's class).
A loop that keeps its own index keeps it, and a first statement that makes it absolute
(``layer_idx = layer_idx + self.start_layer``) comes before the capture.
Captures made on one pipeline stage do not reach the drafter on another before 0.30.0, so a
family backport serves pipeline parallelism 1 (``doctor`` says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
from packaging.version import InvalidVersion, Version

from ..errors import PatchShapeError
from ..releases import MIXIN_FROM, PEP604_FROM, release_of
from . import Rewrite
from ._cst import body_of, dotted, find_all, method, names_used, parse, small, with_body
from ._cst import replace_statement as replace_in
from ._headers import LINE, add_base, code, interfaces_import, typing_import

if TYPE_CHECKING:
    from ..catalogue.family import Family, FamilyModel

INTERFACE = "SupportsEagle3"
MIXIN = "EagleModelMixin"
TUPLE = "tuple[torch.Tensor, list[torch.Tensor]]"


# --- the inner model --------------------------------------------------------------------------


def _self_assigns(fn: cst.FunctionDef, attr: str) -> bool:
    """``fn`` assigns ``self.<attr>`` (plainly or annotated), anywhere in its body."""
    found = find_all(
        fn,
        lambda n: (
            (
                isinstance(n, cst.Assign)
                and any(dotted(t.target) == f"self.{attr}" for t in n.targets)
            )
            or (isinstance(n, cst.AnnAssign) and dotted(n.target) == f"self.{attr}")
        ),
    )
    return bool(found)


def _block(fn: cst.FunctionDef | cst.For | cst.ClassDef, what: str) -> None:
    if not isinstance(fn.body, cst.IndentedBlock):
        raise PatchShapeError(f"{what} is written on one line; expected an indented block")


def _patch_init(fn: cst.FunctionDef) -> cst.FunctionDef:
    _block(fn, "__init__")
    if _self_assigns(fn, "aux_hidden_state_layers"):
        return fn
    stmt = cst.parse_statement("self.aux_hidden_state_layers = tuple[int, ...]()\n")
    stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    return with_body(fn, [*body_of(fn), stmt])


def _layers_iter(it: cst.BaseExpression) -> bool:
    """``islice(self.layers, self.start_layer, self.end_layer)``,
    ``self.layers[self.start_layer : self.end_layer]`` or ``self.layers`` (a model without
    pipeline stages: every layer, counted from 0)."""
    if dotted(it) == "self.layers":
        return True
    if isinstance(it, cst.Call):
        return dotted(it.func) == "islice" and [dotted(a.value) for a in it.args] == [
            "self.layers",
            "self.start_layer",
            "self.end_layer",
        ]
    if isinstance(it, cst.Subscript) and dotted(it.value) == "self.layers":
        index = it.slice[0].slice if len(it.slice) == 1 else None
        return (
            isinstance(index, cst.Slice)
            and dotted(index.lower) == "self.start_layer"
            and dotted(index.upper) == "self.end_layer"
        )
    return False


def _range_index(stmt: cst.For) -> str | None:
    """The index name of ``for i in range(self.start_layer, self.end_layer):`` whose first
    statement is ``layer = self.layers[i]`` (an absolute index), else None."""
    it, target = stmt.iter, stmt.target
    if not (
        isinstance(target, cst.Name)
        and isinstance(it, cst.Call)
        and dotted(it.func) == "range"
        and [dotted(a.value) for a in it.args] == ["self.start_layer", "self.end_layer"]
    ):
        return None
    first = small(body_of(stmt)[0]) if body_of(stmt) else None
    if not (
        isinstance(first, cst.Assign)
        and len(first.targets) == 1
        and dotted(first.targets[0].target) == "layer"
        and isinstance(first.value, cst.Subscript)
        and dotted(first.value.value) == "self.layers"
        and code(first.value.slice[0].slice) == target.value
    ):
        return None
    return target.value


def _enumerated(it: cst.BaseExpression) -> bool:
    """``enumerate(<layers>[, start=...])`` or ``islice(enumerate(self.layers),
    self.start_layer, self.end_layer)`` (an absolute index: Qwen3-VL's language model)."""
    if not isinstance(it, cst.Call):
        return False
    if dotted(it.func) == "islice" and len(it.args) == 3:
        inner = it.args[0].value
        return (
            isinstance(inner, cst.Call)
            and dotted(inner.func) == "enumerate"
            and [dotted(a.value) for a in inner.args] == ["self.layers"]
            and [dotted(a.value) for a in it.args[1:]] == ["self.start_layer", "self.end_layer"]
        )
    return dotted(it.func) == "enumerate" and bool(it.args) and _layers_iter(it.args[0].value)


def _own_index(stmt: cst.For) -> str | None:
    """The index name of ``for i, layer in <enumerated layers>`` (``_enumerated``) or of a
    ``range`` loop (``_range_index``), else None."""
    target, it = stmt.target, stmt.iter
    if isinstance(target, cst.Name):
        return _range_index(stmt)
    if not (
        isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
        and dotted(target.elements[1].value) == "layer"
        and _enumerated(it)
    ):
        return None
    return target.elements[0].value.value


def _rebases(stmt: cst.BaseStatement, idx: str) -> bool:
    """``idx = idx + self.start_layer``: a loop that counts from 0 on the stage making its own
    index absolute (Qwen3-VL's language model, 0.11.x)."""
    node = small(stmt)
    return (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and dotted(node.targets[0].target) == idx
        and " ".join(code(node.value).split()) == f"{idx} + self.start_layer"
    )


def _is_layer_loop(stmt: cst.CSTNode) -> bool:
    """``for layer in <layers>`` or ``for i, layer in enumerate(<layers>)``."""
    if not isinstance(stmt, cst.For):
        return False
    if dotted(stmt.target) == "layer":
        return _layers_iter(stmt.iter)
    return _own_index(stmt) is not None


def _annotation(fn: cst.FunctionDef, pep604: bool) -> cst.FunctionDef:
    """The forward's return annotation gains ``| tuple[torch.Tensor, list[torch.Tensor]]``
    (``pep604`` False, a release that allows Python 3.9: ``Union[..., tuple[...]]``)."""
    returns = fn.returns
    if returns is None or TUPLE in code(returns.annotation):
        return fn
    ann = returns.annotation
    if isinstance(ann, cst.Subscript) and dotted(ann.value) == "Union":
        text = code(ann)
        new = cst.parse_expression(text[:-1].rstrip().rstrip(",") + f", {TUPLE}]")
    elif not pep604:
        new = cst.parse_expression(f"Union[{code(ann)}, {TUPLE}]")
    else:
        new = cst.parse_expression(f"{code(ann)} | {TUPLE}")
    return fn.with_changes(returns=returns.with_changes(annotation=new))


def _loop_header(it: str, absolute: bool) -> str:
    """The loop's header at the forward's indentation (8), wrapped the way black wraps it."""
    # every layer (``self.layers``) counts from 0 whatever the family's index base
    args = [it, "start=self.start_layer"] if absolute and it != "self.layers" else [it]
    one_line = f"for idx, layer in enumerate({', '.join(args)}):"
    if len(one_line) + 8 <= LINE:
        return one_line
    if len(", ".join(args)) + 12 <= LINE:
        return f"for idx, layer in enumerate(\n    {', '.join(args)}\n):"
    return "for idx, layer in enumerate(\n" + "".join(f"    {a},\n" for a in args) + "):"


# A layer that adds its own residual returns the stream itself, and that tensor flows into the
# next layer. Captured as it is, vLLM's compiled CUDA graphs (the V2 runner, 0.22-0.31) break the
# drafter's states: an illegal memory access at 8B size (measured on 0.25.0). ``+ 0``
# makes a tensor of its own (Inductor removes ``.clone()`` as a no-op, and keeps an add of a
# Python number); generation B passes it as the mixin's residual, so it is made only for the
# captured layers.
OWN_TENSOR = "0"


def _capture_a(spec: FamilyModel, family: Family) -> str:
    if spec.capture == "hidden":
        return (
            f"        # a {family.name} layer adds its own residual: this is the stream entering it,\n"
            "        # as a tensor of its own (the stream itself flows into the next layer)\n"
            f"        aux_hidden_states.append(hidden_states + {OWN_TENSOR})\n"
        )
    return (
        "        aux_hidden_states.append(\n"
        "            hidden_states if residual is None else hidden_states + residual\n"
        "        )\n"
    )


def _templates(
    loop_line: str, idx: str, residual: str, spec: FamilyModel, family: Family, mixin: bool
) -> tuple[str, str]:
    """The statement before the loop and the loop's template (its body a ``pass`` the layer
    loop's own statements replace): generation B's two ``_maybe_add_hidden_state`` calls, or
    generation A's list and the capture before each layer."""
    if mixin:
        first = (
            f"aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, {residual})\n"
        )
        template = (
            f"{loop_line}\n    pass\n"
            "    self._maybe_add_hidden_state(\n"
            f"        aux_hidden_states, {idx} + 1, hidden_states, {residual}\n"
            "    )\n"
        )
        return first, template
    template = (
        f"{loop_line}\n    if {idx} in self.aux_hidden_state_layers:\n"
        f"{_capture_a(spec, family)}    pass\n"
    )
    return "aux_hidden_states = []\n", template


def _collect(
    first: str, loop: cst.For, spec: FamilyModel, family: Family, mixin: bool
) -> cst.BaseStatement:
    """The statement that starts the aux list, where the loop's leading lines were; generation
    B's "hidden" capture says why it passes a zero residual."""
    note = [
        cst.EmptyLine(comment=cst.Comment(line))
        for line in (
            f"# a {family.name} layer adds its own residual: the stream it returns flows into the",
            "# next layer; a zero residual makes each capture a tensor of its own",
        )
    ]
    return cst.parse_statement(first).with_changes(
        leading_lines=[*loop.leading_lines, *(note if mixin and spec.capture == "hidden" else [])]
    )


def _patch_forward(
    fn: cst.FunctionDef, spec: FamilyModel, family: Family, mixin: bool, pep604: bool
) -> cst.FunctionDef:
    name = spec.model
    _block(fn, f"{name}.forward")
    if names_used(fn, "aux_hidden_states"):
        return fn
    body: list[cst.BaseStatement] = list(body_of(fn))
    loops = [i for i, stmt in enumerate(body) if _is_layer_loop(stmt)]
    if len(loops) != 1:
        raise PatchShapeError(
            f"{name}.forward: expected one top-level `for layer in` loop over "
            f"self.layers[self.start_layer:self.end_layer], found {len(loops)}"
        )
    last = body[-1]
    ret = small(last)
    if not (isinstance(ret, cst.Return) and dotted(ret.value) == "hidden_states"):
        raise PatchShapeError(f"{name}.forward does not end with `return hidden_states`")
    loop = body[loops[0]]
    assert isinstance(loop, cst.For)
    _block(loop, f"{name}.forward's layer loop")
    idx = _own_index(loop)
    if idx is None:
        if names_used(fn, "idx"):
            raise PatchShapeError(f"{name}.forward already uses the name `idx`")
        idx = "idx"
        header = _loop_header(code(loop.iter), spec.index == "absolute")
    else:  # the loop already counts its layers: keep its header and its index
        header = None
    # "hidden": a zero residual, so the mixin captures ``hidden_states + 0`` (OWN_TENSOR)
    residual = "residual" if spec.capture == "stream" else OWN_TENSOR
    if spec.capture == "stream" and not names_used(loop.body, "residual"):
        raise PatchShapeError(
            f"{name}.forward's layers take no residual: describe the family with "
            'capture = "hidden"'
        )
    first, template = _templates(
        header or "for idx, layer in []:", idx, residual, spec, family, mixin
    )
    shell = cst.parse_statement(template)
    assert isinstance(shell, cst.For)
    parts = list(body_of(shell))  # the template's statements around its `pass`
    before = [] if mixin else parts[:1]
    after = parts[1:] if mixin else []
    header_node = (
        loop.with_changes(
            target=shell.target,
            iter=shell.iter,
            whitespace_after_in=shell.whitespace_after_in,
            whitespace_before_colon=shell.whitespace_before_colon,
            leading_lines=[],
        )
        if header
        else loop.with_changes(leading_lines=[])
    )
    own = list(body_of(loop))
    lead = 1 if own and _rebases(own[0], idx) else 0  # capture at the absolute index
    new_loop = with_body(header_node, [*own[:lead], *before, *own[lead:], *after])
    collect = _collect(first, loop, spec, family, mixin)
    guard = cst.parse_statement(
        "if len(aux_hidden_states) > 0:\n    return hidden_states, aux_hidden_states\n"
    ).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    i = loops[0]
    body = [
        *body[:i],
        collect,
        new_loop,
        *body[i + 1 : -1],
        guard,
        last.with_changes(leading_lines=[]),
    ]
    return _annotation(with_body(fn, body), pep604)


# --- the causal LM ----------------------------------------------------------------------------


def _methods(inner: str) -> list[cst.BaseStatement]:
    text = (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    self.{inner}.aux_hidden_state_layers = layers\n\n"
        "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
        f"    num_layers = len(self.{inner}.layers)\n"
        "    return (2, num_layers // 2, num_layers - 3)\n"
    )
    return [
        s.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        for s in cst.parse_module(text).body
    ]


def _patch_causal_lm(cls: cst.ClassDef, spec: FamilyModel, mixin: bool) -> cst.ClassDef:
    init = method(cls, "__init__")
    if init is None:
        raise PatchShapeError(f"class {cls.name.value} has no __init__")
    holder = spec.inner.split(".")[0]  # "language_model" of "language_model.model"
    if not _self_assigns(init, holder):
        raise PatchShapeError(f"{cls.name.value}.__init__ never sets self.{holder}")
    cls = add_base(cls, INTERFACE)
    if mixin or method(cls, "set_aux_hidden_state_layers") is not None:
        return cls
    based_init = method(cls, "__init__")
    assert based_init is not None
    return replace_in(cls, based_init, [based_init, *_methods(spec.inner)])


def _patch_model(
    cls: cst.ClassDef, spec: FamilyModel, family: Family, mixin: bool, pep604: bool
) -> cst.ClassDef:
    forward = method(cls, "forward")
    if forward is None:
        raise PatchShapeError(f"class {cls.name.value} has no forward")
    if mixin and names_used(forward, "_maybe_add_hidden_state"):
        return cls  # it captures through the mixin already (upstream's, from a base class)
    if mixin:
        cls = add_base(cls, MIXIN)
    elif not names_used(forward, "aux_hidden_states"):  # a forward that captures has its list
        init = method(cls, "__init__")
        if init is None:
            raise PatchShapeError(f"class {cls.name.value} has no __init__")
        cls = replace_in(cls, init, _patch_init(init))
    forward = method(cls, "forward")
    assert forward is not None
    return replace_in(cls, forward, _patch_forward(forward, spec, family, mixin, pep604))


# --- the file ---------------------------------------------------------------------------------


def generation_b(version: str | None) -> bool:
    """True for the releases whose interface has ``EagleModelMixin`` (0.18.0 on)."""
    return _from(version, MIXIN_FROM)


def _from(version: str | None, first: str) -> bool:
    """Whether ``version`` is ``first`` or later (a pre-release counts as its release)."""
    if version is None:
        raise PatchShapeError("the family codemod needs the release it rewrites for")
    try:
        return release_of(version) >= Version(first)
    except InvalidVersion:
        raise PatchShapeError(f"the release {version!r} is not a version") from None


def rewrite(source: str, path: str, *, family: Family, version: str | None = None) -> Rewrite:
    specs = [m for m in family.models if m.file == path and m.rewrite and m.on(version)]
    if len(specs) != 1:
        raise PatchShapeError(f"{path}: the {family.name} family does not describe this file")
    spec = specs[0]
    mixin = generation_b(version)
    pep604 = _from(version, PEP604_FROM)
    module = parse(source, path)
    try:
        body = list(module.body)
        seen = set()
        for i, stmt in enumerate(body):
            if not isinstance(stmt, cst.ClassDef):
                continue
            if stmt.name.value == spec.model and spec.owns_model:
                body[i] = _patch_model(stmt, spec, family, mixin, pep604)
                seen.add(spec.model)
            elif stmt.name.value == spec.causal_lm:
                if spec.interface:
                    body[i] = _patch_causal_lm(stmt, spec, mixin)
                seen.add(spec.causal_lm)
        wanted_classes = (spec.model, spec.causal_lm) if spec.owns_model else (spec.causal_lm,)
        missing = [c for c in wanted_classes if c not in seen]
        if missing:
            raise PatchShapeError(f"class {', '.join(missing)} not found")
        if all(new.deep_equals(old) for new, old in zip(body, module.body, strict=True)):
            return Rewrite(source, changed=False)  # every class has it already: upstream
        module = module.with_changes(body=body)
        wanted = ([MIXIN] if mixin and spec.owns_model else []) + (
            [INTERFACE] if spec.interface else []
        )
        if wanted:
            module, _ = interfaces_import(module, wanted)
        if not pep604 and f", {TUPLE}]" in module.code:
            module = typing_import(module, "Union")
    except PatchShapeError as exc:
        raise PatchShapeError(f"{path}: {exc.message}") from None
    new = module.code
    return Rewrite(new, changed=new != source)
