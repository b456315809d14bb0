"""EAGLE-3 for a model family: the checks every family backport runs with its own names.

A family backport makes ``<Family>ForCausalLM`` implement ``SupportsEagle3`` and its inner
``<Family>Model.forward`` return the auxiliary hidden states; a check file proves both by calling
``implements_supports_eagle3`` and ``forward_captures_aux`` from its own ``check_*`` functions
(whose docstrings name the checks), with the model module it imported and its ``Family``::

    from vllm_patcher_checklib import eagle3

    GRANITE = eagle3.Family(
        "Granite", "GraniteForCausalLM", "GraniteModel", num_layers=40, wanted=(3, 21, 38),
        style="plain", config={"embedding_multiplier": 3.0},
    )

    def check_supports_eagle3(ctx):
        \"\"\"GraniteForCausalLM implements SupportsEagle3 with working default and setter.\"\"\"
        eagle3.implements_supports_eagle3(importlib.import_module(MODULE), GRANITE)

Both drive the release's own code on bare instances (no weights, no GPU): stand-in decoder
layers, embedding, norm and a single-stage pipeline group, each put back afterwards. The
``SpeculativeConfig`` helpers at the end serve the checks of the EAGLE-3 allow-list (through
0.21.x).
"""

# mypy: disable-error-code="misc"
# (torch is not installed where vllm-patcher is type-checked: the stand-ins subclass Any there.
# It is imported where it is used, so that the module imports without it.)
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# --- stand-ins --------------------------------------------------------------------------------


def bare(cls: Any) -> Any:
    """An instance of a vLLM module class without running its __init__ (no GPU, no weights)."""
    import torch

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


# What each style of stand-in layer records as the residual stream entering layer i.
ENTERING = {
    "residual": "hidden_states + residual, or hidden_states where residual is None",
    "plain": "the hidden state passed into it; for layer 0 the scaled embedding",
}


def _stream_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """(hidden_states, residual) of a decoder-layer call, by keyword or by position
    ``(positions, hidden_states, residual, ...)``; residual None where there is none."""
    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[1]
    if "residual" in kwargs:
        return hidden, kwargs["residual"]
    return hidden, args[2] if len(args) > 2 else None


@functools.cache
def stand_ins(style: str, arity: int = 0) -> tuple[type, type]:
    """The stand-in decoder layer and final norm classes of a style: ``"residual"``, vLLM's
    ``(hidden, residual)`` layers (DeepSeek, MiniMax-M2), or ``"plain"``, a layer that adds its
    own residual (Granite). A layer ``Layer(index, seen)`` records the residual stream entering it
    in ``seen[index]``; it takes its arguments by keyword or by position, and returns ``arity``
    values when the forward unpacks more than the style's own (HunYuan's ``kv_states``: None).
    Made on first use, so that this module imports without torch."""
    import torch

    class ResidualLayer(torch.nn.Module):
        use_attn_reduce_scatter_for_moe = False  # Qwen3-Next's forward asks (0.30.0 on)

        def __init__(self, index: int, seen: dict[int, Any]) -> None:
            super().__init__()
            self.index, self.seen = index, seen

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            hidden, residual = _stream_in(args, kwargs)
            entering = hidden if residual is None else hidden + residual
            self.seen[self.index] = entering.clone()
            out = (entering * 0.5 + (self.index + 1), entering)
            return out + (None,) * max(0, arity - 2)

    class ResidualNorm(torch.nn.Module):
        def forward(self, hidden: Any, residual: Any) -> Any:
            return hidden + residual, hidden + residual

    class PlainLayer(torch.nn.Module):
        def __init__(self, index: int, seen: dict[int, Any]) -> None:
            super().__init__()
            self.index, self.seen = index, seen

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            hidden, _ = _stream_in(args, kwargs)
            self.seen[self.index] = hidden.clone()
            # the storage of the very tensor it was given (forward_captures_aux's ``own``)
            self.seen[-(self.index + 1)] = hidden.untyped_storage().data_ptr()
            out = hidden * 0.5 + (self.index + 1)
            return (out,) + (None,) * (arity - 1) if arity > 1 else out

    class PlainNorm(torch.nn.Module):
        def forward(self, hidden: Any) -> Any:
            return hidden * 2

    styles = {"residual": (ResidualLayer, ResidualNorm), "plain": (PlainLayer, PlainNorm)}
    return styles[style]


# What the final norm stand-in of each style makes of the residual stream after the last layer:
# the model's output, when the capture after the last layer is that stream.
NORMED = {"residual": lambda stream: stream, "plain": lambda stream: stream * 2}


def layer_call_arity(cls: type) -> int:
    """How many values the model's forward unpacks from ``layer(...)`` (0: not found), read from
    the source of the first ``forward`` in ``cls``'s MRO that calls ``layer``."""
    import ast
    import textwrap

    for klass in cls.__mro__:
        forward = vars(klass).get("forward")
        if forward is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "layer"
            ):
                target = node.targets[0]
                return len(target.elts) if isinstance(target, ast.Tuple) else 1
    return 0


# --- a family's names -------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """What the EAGLE-3 checks need to know of a model family, in vLLM's model module."""

    name: str  # as users say it: "the model runner refuses EAGLE-3 for <name> targets"
    causal_lm: str  # the class the model runner gets, e.g. "GraniteForCausalLM"
    model: str  # the inner model whose forward captures, e.g. "GraniteModel"
    num_layers: int  # a real checkpoint's decoder layers: the default is (2, n // 2, n - 3)
    wanted: tuple[int, ...]  # aux layers the setter is asked for
    style: str = "residual"  # its decoder layers' style: "residual" or "plain" (stand_ins)
    config: dict[str, Any] = field(default_factory=dict)  # what its forward reads from config
    inner: str = "model"  # the causal LM's path to the inner model ("language_model.model")


# --- the interface and its default aux layers -------------------------------------------------


def default_layers_method() -> str:
    """The name the installed release's model runner calls for the default aux layers."""
    from vllm.model_executor.models.interfaces import SupportsEagle3

    if hasattr(SupportsEagle3, "get_eagle3_default_aux_hidden_state_layers"):
        return "get_eagle3_default_aux_hidden_state_layers"  # 0.18.0 and later
    return "get_eagle3_aux_hidden_state_layers"  # up to 0.17.x


def implements_supports_eagle3(module: Any, family: Family) -> None:
    """The family's causal LM class in ``module`` implements SupportsEagle3 (the model runner
    refuses EAGLE-3 otherwise), its default aux layers for ``family.num_layers`` decoder layers
    are ``(2, n // 2, n - 3)``, and ``set_aux_hidden_state_layers(family.wanted)`` reaches the
    inner model. The default is asked for by the name the installed release's runner uses
    (``default_layers_method``)."""
    import torch
    from vllm.model_executor.models.interfaces import supports_eagle3

    causal_lm, model, wanted = family.causal_lm, family.model, family.wanted
    cls = getattr(module, causal_lm)
    if not supports_eagle3(cls):
        raise AssertionError(
            f"{causal_lm} does not implement SupportsEagle3; "
            f"the model runner refuses EAGLE-3 for {family.name} targets"
        )
    n = family.num_layers
    expected = (2, n // 2, n - 3)
    inner = bare(getattr(module, model))
    inner.config = SimpleNamespace(num_hidden_layers=n)
    inner.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(n)])
    inner.start_layer, inner.end_layer = 0, n
    outer = bare(cls)
    outer.config = inner.config
    holder = outer
    *path, last = family.inner.split(".")
    for attr in path:  # a VL wrapper's language model: a bare module holding the inner model
        setattr(holder, attr, torch.nn.Module())
        holder = getattr(holder, attr)
        holder.embed_input_ids = lambda ids: ids  # as get_language_model recognises one
    setattr(holder, last, inner)
    if path:  # what ``_mark_language_model`` records in __init__ (get_language_model, 0.2x on)
        outer._language_model_names = [".".join(path)]

    method = default_layers_method()
    try:
        got = getattr(outer, method)()
    except Exception as exc:
        raise AssertionError(
            f"{causal_lm}.{method}() raised {type(exc).__name__}: {exc}; "
            "the model runner calls it for the default EAGLE-3 aux layers"
        ) from exc
    if got is None:
        raise AssertionError(
            f"{causal_lm}.{method}() returned None (the interface's empty stub); "
            f"it must return the default aux layers {expected} for {n} layers"
        )
    if tuple(got) != expected:
        raise AssertionError(
            f"{causal_lm}.{method}() returned {tuple(got)} for {n} decoder layers; "
            f"vLLM's default is (2, n // 2, n - 3) = {expected}"
        )

    try:
        outer.set_aux_hidden_state_layers(wanted)
    except Exception as exc:
        raise AssertionError(
            f"{causal_lm}.set_aux_hidden_state_layers{wanted} raised {type(exc).__name__}: {exc}"
        ) from exc
    if "aux_hidden_state_layers" not in vars(inner):
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) did not reach {model}: its "
            "aux_hidden_state_layers was never set, so forward would not capture those layers"
        )
    stored = inner.aux_hidden_state_layers
    if tuple(stored) != wanted:
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) left {model}.aux_hidden_state_layers "
            f"at {stored!r}, so forward would capture the wrong layers"
        )


# --- the forward capture ----------------------------------------------------------------------


def _pp_modules(cls: type) -> list[Any]:
    """The modules along ``cls``'s MRO whose code calls ``get_pp_group`` (a family's forward may
    be its parent's: MistralModel runs LlamaModel's)."""
    import sys

    out = []
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if module is not None and hasattr(module, "get_pp_group") and module not in out:
            out.append(module)
    return out


def forward_captures_aux(
    module: Any, family: Family, model_class: Any = None, first: int = 0, own: bool = False
) -> None:
    """The real forward of the family's inner model in ``module`` (or ``model_class``), over 6
    stand-in layers of the family's style, returns ``(hidden, aux)`` whose entries are the residual
    stream entering layers 0, 3 and 5 (layer 0 included), the plain tensor when no aux layers are
    asked for, and the same final hidden state either way. Where the model captures through
    ``EagleModelMixin`` (0.18.0 on), layer 6 too, after the last layer: that capture, normed the
    way the model norms, must be the model's output (a capture of anything but the residual
    stream, as ``h + residual`` where ``h`` already is the stream, fails here). ``first``: the
    first layer asked for (upstream's own Llama capture adds a residual that is still None before
    layer 0, so a class it serves unchanged is asked from layer 1). ``own`` (a backport's layers
    that add their own residual): each capture is a tensor of its own, never the very tensor the
    next layer is given (under vLLM's compiled CUDA graphs that breaks the drafter).
    ``get_pp_group`` is stood in, and put back, in every module the forward's code runs in."""
    import torch

    model = family.model
    cls = model_class if model_class is not None else getattr(module, model)
    arity = layer_call_arity(cls)
    layer, norm_class = stand_ins(family.style, arity)
    norm = norm_class()
    n = 6
    hidden_size = 8
    pp = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)
    mixin = any(k.__name__ == "EagleModelMixin" for k in cls.__mro__)

    def run(aux: tuple[int, ...]) -> tuple[Any, dict[int, torch.Tensor]]:
        seen: dict[int, torch.Tensor] = {}
        instance = bare(cls)
        instance.config = SimpleNamespace(
            num_hidden_layers=n, hidden_size=hidden_size, **family.config
        )
        for key, value in family.config.items():
            setattr(instance, key, value)  # GraniteMoe reads its multiplier from itself
        instance.layers = torch.nn.ModuleList([layer(i, seen) for i in range(n)])
        instance.start_layer, instance.end_layer = 0, n
        torch.manual_seed(0)
        instance.embed_tokens = torch.nn.Embedding(16, hidden_size)
        instance.tok_embeddings = instance.embed_tokens  # InternLM2's name
        instance.norm = norm
        instance.norm_f = norm  # Nemotron-H's final norm
        instance.aux_hidden_state_layers = aux
        with torch.no_grad():
            out = type(instance).forward(instance, torch.tensor([1, 5, 7]), torch.arange(3), None)
        return out, seen

    wanted = (first, 3, 5, n) if mixin else (first, 3, 5)
    modules = _pp_modules(cls)
    originals = [m.get_pp_group for m in modules]
    for m in modules:
        m.get_pp_group = lambda: pp
    try:
        try:
            plain, _ = run(())
            out, seen = run(wanted)
        except Exception as exc:
            raise AssertionError(
                f"{model}.forward raised {type(exc).__name__}: {exc} "
                f"when driven with stand-in layers (aux layers {', '.join(map(str, wanted))})"
            ) from exc
    finally:
        for m, original in zip(modules, originals, strict=True):
            m.get_pp_group = original

    _judge_capture(family, wanted, n, plain, out, seen)
    if own:
        _judge_own_tensors(family, wanted, n, out[1], seen)


def _judge_own_tensors(
    family: Family, wanted: tuple[int, ...], n: int, aux: list[Any], seen: dict[int, Any]
) -> None:
    for index, state in zip(wanted, aux, strict=True):
        if index < n and state.untyped_storage().data_ptr() == seen.get(-(index + 1)):
            raise AssertionError(
                f"the aux state for layer {index} is the very tensor {family.model} passes into "
                f"layer {index}, not a tensor of its own: under vLLM's compiled CUDA graphs "
                "that breaks the drafter's states (an illegal memory access at real sizes)"
            )


def _judge_capture(
    family: Family, wanted: tuple[int, ...], n: int, plain: Any, out: Any, seen: dict[int, Any]
) -> None:
    """forward_captures_aux's verdict on what the forward returned."""
    import torch

    model = family.model
    if not isinstance(plain, torch.Tensor):
        raise AssertionError(
            f"{model}.forward without aux layers returned "
            f"{type(plain).__name__}, not the plain hidden-state tensor"
        )
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list)):
        raise AssertionError(
            f"{model}.forward with aux layers {wanted} returned "
            f"{type(out).__name__}, not (hidden_states, aux_hidden_states): the aux capture is "
            "missing, so the EAGLE-3 drafter would get no target features"
        )
    hidden, aux = out
    if len(aux) != len(wanted):
        raise AssertionError(
            f"{model}.forward returned {len(aux)} aux states for aux layers {wanted}: one "
            "tensor per requested layer is what the drafter's input is sized for"
        )
    for index, state in zip(wanted, aux, strict=True):
        if index == n:
            if not torch.equal(NORMED[family.style](state), hidden):
                raise AssertionError(
                    f"the aux state after the last layer, normed the way {model} norms, is not "
                    "its output: the capture is not the residual stream"
                )
        elif not torch.equal(state, seen[index]):
            raise AssertionError(
                f"the aux state for layer {index} is not the residual stream entering layer "
                f"{index} ({ENTERING[family.style]})"
            )
    if not torch.equal(hidden, plain):
        raise AssertionError(f"capturing aux states changed {model}'s final hidden states")


def model_module(ctx: Any, name: str) -> Any:
    """The model module ``name``, imported. One that fails to import is the finding, except where
    the check's patch is upstream (``ctx.upstream``): then the module is the release's own, and
    whether it imports in this interpreter (the CPU build's qwen3_vl needs torchvision) is no
    verdict on a patch, so the check is skipped saying so."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        said = f"importing {name} failed: {type(exc).__name__}: {exc}"
        if ctx.upstream:
            ctx.skip(f"{said}; vLLM {ctx.version} has this change upstream, so no patch is in it")
        raise RuntimeError(said) from exc


# --- Kimi-K2.5, the model several patches' checks build --------------------------------------

KIMI_K25 = "vllm.model_executor.models.kimi_k25"


def skip_without_kimi_k25(ctx: Any) -> None:
    """Skip the calling check where the installed vLLM has no Kimi-K2.5 model to check (found
    without importing it). The one wording of that skip for every check file."""
    if importlib.util.find_spec(KIMI_K25) is None:
        ctx.skip(f"vLLM {ctx.version} has no Kimi-K2.5 model (kimi_k25.py arrived in 0.15.0)")


# --- the EAGLE-3 allow-list of SpeculativeConfig ----------------------------------------------


def skip_without_allow_list(ctx: Any) -> None:
    """Skip the calling check where the installed vLLM has no EAGLE-3 allow-list to widen or to
    refuse with (``ctx.allow_list``, the tool's verdict: a check never works it out itself): the
    model runner's SupportsEagle3 check is the gate there. The one wording of that skip for every
    check file."""
    if not ctx.allow_list:
        ctx.skip(
            f"vLLM {ctx.version} has no EAGLE-3 allow-list in vllm/config/speculative.py: the "
            "model runner's SupportsEagle3 check is the gate there"
        )


def model_config(path: str, what: str, **options: Any) -> Any:
    """The real ``ModelConfig`` of the checkpoint folder ``path`` (no tokenizer). One that cannot
    be built is no verdict on the patch: a RuntimeError naming ``what`` and what vLLM said."""
    from vllm.config import ModelConfig

    try:
        return ModelConfig(model=path, skip_tokenizer_init=True, **options)
    except Exception as exc:
        raise RuntimeError(f"could not build the ModelConfig of {what}: {rejection(exc)}") from exc


def speculative_config(target: Any, drafter: str, parallel: Any = None) -> Any:
    """The real eagle3 ``SpeculativeConfig`` for the target ``ModelConfig`` and the drafter
    folder, as a server builds it before any proposer exists (raises what it raises)."""
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        method="eagle3",
        model=drafter,
        num_speculative_tokens=3,
        target_model_config=target,
        target_parallel_config=ParallelConfig() if parallel is None else parallel,
    )


def rejection(exc: BaseException) -> str:
    """The whole of what vLLM said, on one line (400 characters at most)."""
    return " ".join(str(exc).split())[:400] or repr(exc)


def refusal(exc: BaseException, whole: bool = False) -> str:
    """The refusal's last line; all of it (300 characters) with ``whole`` or when it is the
    allow-list's "only supported" refusal."""
    text = str(exc).strip()
    if whole or "only supported" in text:
        return " ".join(text.split())[:300]
    return text.splitlines()[-1] if text else repr(exc)


def accepts(target: Any, drafter: str, model_type: str, refused_means: str) -> None:
    """The eagle3 ``SpeculativeConfig`` accepts the ``model_type`` target; refused by the
    allow-list, the finding is ``refused_means`` (what the list lacks), then what vLLM said."""
    try:
        speculative_config(target, drafter)
    except Exception as exc:
        why = rejection(exc)
        if "only supported" in why:
            raise AssertionError(
                f"vLLM's SpeculativeConfig rejects EAGLE-3 for a {model_type} target: "
                f"{refused_means} (vLLM said: {why})"
            ) from exc
        raise AssertionError(
            f"SpeculativeConfig(method='eagle3') failed for a {model_type} target: {why}"
        ) from exc


def refuses(control: Any, drafter: str, model_type: str, accepted_means: str) -> None:
    """The eagle3 ``SpeculativeConfig`` refuses the ``model_type`` control target with the
    allow-list's error; accepted, the finding is ``accepted_means`` (how the list went wrong)."""
    try:
        speculative_config(control, drafter)
    except Exception as exc:
        if "only supported" not in rejection(exc):
            raise AssertionError(
                f"SpeculativeConfig(method='eagle3') failed for the {model_type} control target, "
                f"but not with the allow-list error: {rejection(exc)}"
            ) from exc
    else:
        raise AssertionError(
            f"SpeculativeConfig accepted EAGLE-3 for a {model_type} target{accepted_means}"
        )
