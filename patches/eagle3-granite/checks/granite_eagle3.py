"""Behaviour checks for eagle3-granite: EAGLE-3 with a Granite (GraniteForCausalLM) target.

Loaded inside the target environment's interpreter (vLLM and torch importable). Each ``check_*``
function gets ``ctx`` (``ctx.version``, ``ctx.workdir``, ``ctx.skip(reason)``), passes by
returning and fails by raising with a plain-words message. Only the standard library, torch and
vLLM are used; every stand-in installed here is taken back out in a ``finally``.

What the patch must achieve, and what these checks drive with the installed vLLM's own code:

1. ``GraniteForCausalLM`` implements ``SupportsEagle3`` (the model runner refuses EAGLE-3
   otherwise), its default aux layers are ``(2, n // 2, n - 3)`` for ``n`` decoder layers, and
   ``set_aux_hidden_state_layers`` reaches the inner ``GraniteModel``. vLLM up to 0.17.x asks
   the model for ``get_eagle3_aux_hidden_state_layers()`` (the model defines it); 0.18.0 and
   later ask for ``get_eagle3_default_aux_hidden_state_layers()`` and route
   ``set_aux_hidden_state_layers`` through ``EagleModelMixin`` on ``GraniteModel``. The check
   calls the one the installed release's runner calls.
2. The real ``GraniteModel.forward``, driven with stand-in decoder layers, embedding, norm and a
   single-stage pipeline group, returns ``(hidden, aux)`` whose entries are the residual stream
   entering each requested layer (layer 0 included), and the plain tensor when no aux layers
   are asked for. A Granite decoder layer adds its own residual, so that stream is the hidden
   state passed into the layer.
3. Where the release still has the EAGLE-3 allow-list (through 0.21.x), the real
   ``SpeculativeConfig`` (method ``eagle3``) accepts a tiny ``granite`` target and still rejects
   ``granitemoe``, which the list's substring match would admit if ``"granite"`` were an entry
   but whose model has no EAGLE-3 support.
"""

from __future__ import annotations

import importlib
import json
import os
from types import SimpleNamespace
from typing import Any

MODULE = "vllm.model_executor.models.granite"
NUM_LAYERS = 40  # Granite 3.x 8B: vLLM's default aux layers are then (2, 20, 37)


def _granite() -> Any:
    try:
        return importlib.import_module(MODULE)
    except Exception as exc:
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc


def _bare(cls: Any) -> Any:
    """An instance of a vLLM module class without running its __init__ (no GPU, no weights)."""
    import torch

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def _default_layers_method() -> str:
    """The name the installed release's model runner calls for the default aux layers."""
    from vllm.model_executor.models.interfaces import SupportsEagle3

    if hasattr(SupportsEagle3, "get_eagle3_default_aux_hidden_state_layers"):
        return "get_eagle3_default_aux_hidden_state_layers"  # 0.18.0 and later
    return "get_eagle3_aux_hidden_state_layers"  # 0.11.0 to 0.17.x


def check_supports_eagle3(ctx: Any) -> None:
    """GraniteForCausalLM implements SupportsEagle3 with working default and setter."""
    import torch
    from vllm.model_executor.models.interfaces import supports_eagle3

    gm = _granite()
    cls = gm.GraniteForCausalLM
    if not supports_eagle3(cls):
        raise AssertionError(
            "GraniteForCausalLM does not implement SupportsEagle3; "
            "the model runner refuses EAGLE-3 for Granite targets"
        )
    n = NUM_LAYERS
    expected = (2, n // 2, n - 3)
    inner = _bare(gm.GraniteModel)
    inner.config = SimpleNamespace(num_hidden_layers=n)
    inner.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(n)])
    inner.start_layer, inner.end_layer = 0, n
    model = _bare(cls)
    model.config = inner.config
    model.model = inner

    method = _default_layers_method()
    try:
        got = getattr(model, method)()
    except Exception as exc:
        raise AssertionError(
            f"GraniteForCausalLM.{method}() raised {type(exc).__name__}: {exc}; "
            "the model runner calls it for the default EAGLE-3 aux layers"
        ) from exc
    if got is None:
        raise AssertionError(
            f"GraniteForCausalLM.{method}() returned None (the interface's empty stub); "
            f"it must return the default aux layers {expected} for {n} layers"
        )
    if tuple(got) != expected:
        raise AssertionError(
            f"GraniteForCausalLM.{method}() returned {tuple(got)} for {n} decoder layers; "
            f"vLLM's default is (2, n // 2, n - 3) = {expected}"
        )

    wanted = (3, 21, 38)
    try:
        model.set_aux_hidden_state_layers(wanted)
    except Exception as exc:
        raise AssertionError(
            f"GraniteForCausalLM.set_aux_hidden_state_layers{wanted} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if "aux_hidden_state_layers" not in vars(inner):
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) did not reach GraniteModel: its "
            "aux_hidden_state_layers was never set, so forward would not capture those layers"
        )
    stored = inner.aux_hidden_state_layers
    if tuple(stored) != wanted:
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) left GraniteModel.aux_hidden_state_layers "
            f"at {stored!r}, so forward would capture the wrong layers"
        )


def check_forward_returns_aux_states(ctx: Any) -> None:
    """The real GraniteModel.forward captures the residual stream entering requested layers."""
    import torch

    gm = _granite()
    n = 6
    hidden_size = 8

    class Layer(torch.nn.Module):
        def __init__(self, index: int, seen: dict[int, torch.Tensor]) -> None:
            super().__init__()
            self.index, self.seen = index, seen

        def forward(self, positions: Any, hidden: torch.Tensor, *rest: Any) -> torch.Tensor:
            self.seen[self.index] = hidden.clone()
            return hidden * 0.5 + (self.index + 1)

    class Norm(torch.nn.Module):
        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            return hidden * 2

    pp = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)

    def run(aux: tuple[int, ...]) -> tuple[Any, dict[int, torch.Tensor]]:
        seen: dict[int, torch.Tensor] = {}
        model = _bare(gm.GraniteModel)
        model.config = SimpleNamespace(
            num_hidden_layers=n, hidden_size=hidden_size, embedding_multiplier=3.0
        )
        model.layers = torch.nn.ModuleList([Layer(i, seen) for i in range(n)])
        model.start_layer, model.end_layer = 0, n
        torch.manual_seed(0)
        model.embed_tokens = torch.nn.Embedding(16, hidden_size)
        model.norm = Norm()
        model.aux_hidden_state_layers = aux
        with torch.no_grad():
            out = type(model).forward(model, torch.tensor([1, 5, 7]), torch.arange(3), None)
        return out, seen

    original = gm.get_pp_group
    gm.get_pp_group = lambda: pp
    try:
        try:
            plain, _ = run(())
            wanted = (0, 3, 5)
            out, seen = run(wanted)
        except Exception as exc:
            raise AssertionError(
                f"GraniteModel.forward raised {type(exc).__name__}: {exc} "
                "when driven with stand-in layers (aux layers 0, 3, 5)"
            ) from exc
    finally:
        gm.get_pp_group = original

    if not isinstance(plain, torch.Tensor):
        raise AssertionError(
            "GraniteModel.forward without aux layers returned "
            f"{type(plain).__name__}, not the plain hidden-state tensor"
        )
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list)):
        raise AssertionError(
            "GraniteModel.forward with aux layers (0, 3, 5) returned "
            f"{type(out).__name__}, not (hidden_states, aux_hidden_states): the aux capture is "
            "missing, so the EAGLE-3 drafter would get no target features"
        )
    hidden, aux = out
    if len(aux) != len(wanted):
        raise AssertionError(
            f"GraniteModel.forward returned {len(aux)} aux states for aux layers {wanted}"
        )
    for index, state in zip(wanted, aux, strict=True):
        if not torch.equal(state, seen[index]):
            raise AssertionError(
                f"the aux state for layer {index} is not the residual stream entering layer "
                f"{index} (the hidden state passed into it; for layer 0 the scaled embedding)"
            )
    if not torch.equal(hidden, plain):
        raise AssertionError("capturing aux states changed GraniteModel's final hidden states")


def _has_allow_list() -> bool:
    """True where SpeculativeConfig still checks the target's model_type (through 0.21.x)."""
    import inspect

    source = inspect.getsource(importlib.import_module("vllm.config.speculative"))
    return "eagle3_target_supported" in source or "aux_hidden_states_supported" in source


def _target_config(model_type: str, architecture: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22,
        "attention_multiplier": 0.015625,
        "logits_scaling": 8.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    if model_type == "granitemoe":
        config.update(num_local_experts=4, num_experts_per_tok=2)
    return config


DRAFTER_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 256,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}


def _rejection(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400] or repr(exc)


def check_speculative_config_accepts_granite(ctx: Any) -> None:
    """The real SpeculativeConfig accepts EAGLE-3 for a granite target (and still rejects granitemoe)."""
    if not _has_allow_list():
        ctx.skip(
            f"vLLM {ctx.version} has no EAGLE-3 allow-list in vllm/config/speculative.py "
            "(gone from 0.22.0): the runner's SupportsEagle3 check above is the gate"
        )
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    def write(name: str, config: dict[str, Any]) -> str:
        path = os.path.join(ctx.workdir, name)
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as fh:
            json.dump(config, fh)
        return path

    drafter = write("eagle3_drafter", DRAFTER_CONFIG)

    def target(model_type: str, architecture: str) -> Any:
        path = write(f"{model_type}_target", _target_config(model_type, architecture))
        try:
            config = ModelConfig(model=path, skip_tokenizer_init=True)
        except Exception as exc:
            raise RuntimeError(
                f"could not build the ModelConfig of a tiny {model_type} target: {_rejection(exc)}"
            ) from exc
        got = config.hf_text_config.model_type
        if got != model_type:
            raise RuntimeError(
                f"the tiny {model_type} target loaded with model_type {got!r}; "
                "the check cannot judge the allow-list"
            )
        return config

    def speculative(target_config: Any) -> Any:
        return SpeculativeConfig(
            method="eagle3",
            model=drafter,
            num_speculative_tokens=3,
            target_model_config=target_config,
            target_parallel_config=ParallelConfig(),
        )

    try:
        speculative(target("granite", "GraniteForCausalLM"))
    except Exception as exc:
        why = _rejection(exc)
        if "only supported" in why:
            raise AssertionError(
                "vLLM's SpeculativeConfig rejects EAGLE-3 for a granite target: the allow-list "
                f"check in vllm/config/speculative.py does not admit 'granite' (vLLM said: {why})"
            ) from exc
        raise AssertionError(
            f"SpeculativeConfig(method='eagle3') failed for a granite target: {why}"
        ) from exc

    try:
        speculative(target("granitemoe", "GraniteMoeForCausalLM"))
    except Exception as exc:
        if "only supported" not in _rejection(exc):
            raise AssertionError(
                "SpeculativeConfig(method='eagle3') failed for the granitemoe control target, "
                f"but not with the allow-list error: {_rejection(exc)}"
            ) from exc
    else:
        raise AssertionError(
            "SpeculativeConfig accepted EAGLE-3 for a granitemoe target, whose model has no "
            "EAGLE-3 support: the allow-list admits every model_type containing 'granite' "
            "instead of granite exactly"
        )
