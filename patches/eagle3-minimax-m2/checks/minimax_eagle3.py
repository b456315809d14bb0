"""Behaviour checks for eagle3-minimax-m2: EAGLE-3 with a MiniMax-M2 target.

Loaded inside the target environment's interpreter (vLLM and torch importable). Each ``check_*``
function gets ``ctx`` (``ctx.version``, ``ctx.workdir``, ``ctx.skip(reason)``), passes by
returning and fails by raising with a plain-words message. Only the standard library, torch and
vLLM are used; every stand-in installed here is taken back out in a ``finally``.

What the patch must achieve, and what these checks drive with the installed vLLM's own code:

1. ``MiniMaxM2ForCausalLM`` implements ``SupportsEagle3`` (the model runner refuses EAGLE-3
   otherwise), its default aux layers are ``(2, n // 2, n - 3)`` for ``n`` decoder layers, and
   ``set_aux_hidden_state_layers`` reaches the inner ``MiniMaxM2Model``. vLLM up to 0.17.x asks
   the model for ``get_eagle3_aux_hidden_state_layers()``; 0.18.0 and later ask for
   ``get_eagle3_default_aux_hidden_state_layers()`` (and route ``set_aux_hidden_state_layers``
   through ``EagleModelMixin``). The check calls the one the installed release's runner calls.
2. The real ``MiniMaxM2Model.forward``, driven with stand-in decoder layers, embedding, norm and
   a single-stage pipeline group, returns ``(hidden, aux)`` whose entries are the residual stream
   entering each requested layer (layer 0 included: there ``residual`` is still None), and the
   plain tensor when no aux layers are asked for.
3. The real ``SpeculativeConfig`` (method ``eagle3``) accepts a tiny ``minimax_m2`` target whose
   config class arrives through ``auto_map`` / ``trust_remote_code``, as the real MiniMax-M2
   checkpoint's does, and still rejects a family that is not on the allow-list.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

MODULE = "vllm.model_executor.models.minimax_m2"
NUM_LAYERS = 62  # MiniMax-M2 and M2.1: vLLM's default aux layers are then (2, 31, 59)


def _minimax(ctx: Any) -> Any:
    """The installed minimax_m2 module; skip on releases that have none (before 0.11.1)."""
    try:
        return importlib.import_module(MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == MODULE:
            ctx.skip(
                f"vLLM {ctx.version} has no MiniMax-M2 model (minimax_m2.py arrived in 0.11.1)"
            )
        raise RuntimeError(f"importing {MODULE} failed: {type(exc).__name__}: {exc}") from exc
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
    return "get_eagle3_aux_hidden_state_layers"  # 0.11.1 to 0.17.x


def check_supports_eagle3(ctx: Any) -> None:
    """MiniMaxM2ForCausalLM implements SupportsEagle3 with working default and setter."""
    import torch
    from vllm.model_executor.models.interfaces import supports_eagle3

    mm = _minimax(ctx)
    cls = mm.MiniMaxM2ForCausalLM
    if not supports_eagle3(cls):
        raise AssertionError(
            "MiniMaxM2ForCausalLM does not implement SupportsEagle3; "
            "the model runner refuses EAGLE-3 for MiniMax-M2 targets"
        )
    n = NUM_LAYERS
    expected = (2, n // 2, n - 3)
    inner = _bare(mm.MiniMaxM2Model)
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
            f"MiniMaxM2ForCausalLM.{method}() raised {type(exc).__name__}: {exc}; "
            "the model runner calls it for the default EAGLE-3 aux layers"
        ) from exc
    if got is None:
        raise AssertionError(
            f"MiniMaxM2ForCausalLM.{method}() returned None (the interface's empty stub); "
            f"it must return the default aux layers {expected} for {n} layers"
        )
    if tuple(got) != expected:
        raise AssertionError(
            f"MiniMaxM2ForCausalLM.{method}() returned {tuple(got)} for {n} decoder layers; "
            f"vLLM's default is (2, n // 2, n - 3) = {expected}"
        )

    wanted = (3, 31, 59)
    try:
        model.set_aux_hidden_state_layers(wanted)
    except Exception as exc:
        raise AssertionError(
            f"MiniMaxM2ForCausalLM.set_aux_hidden_state_layers{wanted} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if "aux_hidden_state_layers" not in vars(inner):
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) did not reach MiniMaxM2Model: its "
            "aux_hidden_state_layers was never set, so forward would not capture those layers"
        )
    stored = inner.aux_hidden_state_layers
    if tuple(stored) != wanted:
        raise AssertionError(
            f"set_aux_hidden_state_layers({wanted}) left MiniMaxM2Model.aux_hidden_state_layers "
            f"at {stored!r}, so forward would capture the wrong layers"
        )


def check_forward_returns_aux_states(ctx: Any) -> None:
    """The real MiniMaxM2Model.forward captures the residual stream entering requested layers."""
    import torch

    mm = _minimax(ctx)
    n = 6
    hidden_size = 8

    class Layer(torch.nn.Module):
        def __init__(self, index: int, seen: dict[int, torch.Tensor]) -> None:
            super().__init__()
            self.index, self.seen = index, seen

        def forward(self, positions: Any, hidden: torch.Tensor, residual: Any, *rest: Any) -> Any:
            entering = hidden if residual is None else hidden + residual
            self.seen[self.index] = entering.clone()
            return entering * 0.5 + (self.index + 1), entering

    class Norm(torch.nn.Module):
        def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> Any:
            return hidden + residual, hidden + residual

    pp = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)

    def run(aux: tuple[int, ...]) -> tuple[Any, dict[int, torch.Tensor]]:
        seen: dict[int, torch.Tensor] = {}
        model = _bare(mm.MiniMaxM2Model)
        model.config = SimpleNamespace(num_hidden_layers=n, hidden_size=hidden_size)
        model.layers = torch.nn.ModuleList([Layer(i, seen) for i in range(n)])
        model.start_layer, model.end_layer = 0, n
        torch.manual_seed(0)
        model.embed_tokens = torch.nn.Embedding(16, hidden_size)
        model.norm = Norm()
        model.aux_hidden_state_layers = aux
        with torch.no_grad():
            out = type(model).forward(
                model,
                torch.tensor([1, 5, 7]),
                torch.arange(3),
                None,
            )
        return out, seen

    original = mm.get_pp_group
    mm.get_pp_group = lambda: pp
    try:
        try:
            plain, _ = run(())
            wanted = (0, 3, 5)
            out, seen = run(wanted)
        except Exception as exc:
            raise AssertionError(
                f"MiniMaxM2Model.forward raised {type(exc).__name__}: {exc} "
                "when driven with stand-in layers (aux layers 0, 3, 5)"
            ) from exc
    finally:
        mm.get_pp_group = original

    if not isinstance(plain, torch.Tensor):
        raise AssertionError(
            "MiniMaxM2Model.forward without aux layers returned "
            f"{type(plain).__name__}, not the plain hidden-state tensor"
        )
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list)):
        raise AssertionError(
            "MiniMaxM2Model.forward with aux layers (0, 3, 5) returned "
            f"{type(out).__name__}, not (hidden_states, aux_hidden_states): the aux capture is "
            "missing, so the EAGLE-3 drafter would get no target features"
        )
    hidden, aux = out
    if len(aux) != len(wanted):
        raise AssertionError(
            f"MiniMaxM2Model.forward returned {len(aux)} aux states for aux layers {wanted}"
        )
    for index, state in zip(wanted, aux, strict=True):
        if not torch.equal(state, seen[index]):
            raise AssertionError(
                f"the aux state for layer {index} is not the residual stream entering layer "
                f"{index} (hidden_states + residual, or hidden_states where residual is None)"
            )
    if not torch.equal(hidden, plain):
        raise AssertionError("capturing aux states changed MiniMaxM2Model's final hidden states")


TARGET_CONFIG = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "auto_map": {"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config"},
    "hidden_size": 256,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rotary_dim": 32,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "scoring_func": "sigmoid",
    "use_routing_bias": True,
    "use_qk_norm": True,
    "qk_norm_type": "per_layer",
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 5000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# What a MiniMax-M2 checkpoint ships next to its config.json (transformers 4.57 has no
# minimax_m2 config class); trimmed to what a config needs.
CONFIGURATION_MODULE = """
from transformers.configuration_utils import PretrainedConfig


class MiniMaxM2Config(PretrainedConfig):
    model_type = "minimax_m2"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=200064,
        hidden_size=3072,
        intermediate_size=1536,
        num_hidden_layers=62,
        num_attention_heads=48,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=196608,
        rms_norm_eps=1e-06,
        rope_theta=5000000,
        num_local_experts=256,
        num_experts_per_tok=8,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.num_local_experts = num_local_experts
        self.num_experts_per_tok = num_experts_per_tok
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
"""

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

CONTROL_CONFIG = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 256,
    "n_layer": 2,
    "n_head": 4,
    "vocab_size": 1024,
    "n_positions": 1024,
    "torch_dtype": "float16",
}


@contextlib.contextmanager
def _private_remote_code_cache(root: str) -> Iterator[None]:
    """Keep trust_remote_code's copy of the config module under ``root``, not in ~/.cache.

    transformers copies a checkpoint's own code into its modules cache before importing it. The
    module-level cache path, ``sys.path`` and the ``transformers_modules`` entries this adds to
    ``sys.modules`` are all put back afterwards.
    """
    try:
        dmu: Any = importlib.import_module("transformers.dynamic_module_utils")
    except ImportError:
        dmu = None
    if dmu is None or not hasattr(dmu, "HF_MODULES_CACHE"):
        yield
        return
    saved_cache = dmu.HF_MODULES_CACHE
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    dmu.HF_MODULES_CACHE = os.path.join(root, "hf_modules")
    try:
        yield
    finally:
        dmu.HF_MODULES_CACHE = saved_cache
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name == "transformers_modules" or name.startswith("transformers_modules."):
                del sys.modules[name]


def _rejection(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400] or repr(exc)


def _has_allow_list() -> bool:
    """True where SpeculativeConfig still checks the target's model_type (through 0.21.x)."""
    import inspect

    source = inspect.getsource(importlib.import_module("vllm.config.speculative"))
    return "eagle3_target_supported" in source or "aux_hidden_states_supported" in source


def check_speculative_config_accepts_minimax_m2(ctx: Any) -> None:
    """The real SpeculativeConfig accepts EAGLE-3 for a minimax_m2 target (and still rejects gpt2)."""
    _minimax(ctx)
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    def write(name: str, config: dict[str, Any], extra: dict[str, str] | None = None) -> str:
        path = os.path.join(ctx.workdir, name)
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as fh:
            json.dump(config, fh)
        for filename, text in (extra or {}).items():
            with open(os.path.join(path, filename), "w") as fh:
                fh.write(text)
        return path

    drafter = write("eagle3_drafter", DRAFTER_CONFIG)
    target_dir = write(
        "minimax_m2_target",
        TARGET_CONFIG,
        {"configuration_minimax_m2.py": CONFIGURATION_MODULE},
    )
    control_dir = write("gpt2_target", CONTROL_CONFIG)

    def speculative(target: Any) -> Any:
        return SpeculativeConfig(
            method="eagle3",
            model=drafter,
            num_speculative_tokens=3,
            target_model_config=target,
            target_parallel_config=ParallelConfig(),
        )

    with _private_remote_code_cache(ctx.workdir):
        try:
            target = ModelConfig(model=target_dir, trust_remote_code=True, skip_tokenizer_init=True)
        except Exception as exc:
            raise RuntimeError(
                "could not build the ModelConfig of a tiny minimax_m2 target (config class "
                f"through auto_map and trust_remote_code): {_rejection(exc)}"
            ) from exc
        model_type = target.hf_text_config.model_type
        if model_type != "minimax_m2":
            raise RuntimeError(
                f"the tiny MiniMax-M2 target loaded with model_type {model_type!r}, "
                "not 'minimax_m2'; the check cannot judge the allow-list"
            )
        try:
            speculative(target)
        except Exception as exc:
            why = _rejection(exc)
            if "only supported" in why:
                raise AssertionError(
                    "vLLM's SpeculativeConfig rejects EAGLE-3 for a minimax_m2 target: "
                    "'minimax_m2' is not on the EAGLE-3 allow-list in vllm/config/speculative.py"
                    f" (vLLM said: {why})"
                ) from exc
            raise AssertionError(
                f"SpeculativeConfig(method='eagle3') failed for a minimax_m2 target: {why}"
            ) from exc

    if not _has_allow_list():
        return  # no allow-list from 0.22.0: nothing to reject gpt2 with, the runner is the gate
    try:
        control = ModelConfig(model=control_dir, skip_tokenizer_init=True)
    except Exception as exc:
        raise RuntimeError(
            f"could not build the ModelConfig of the gpt2 control target: {_rejection(exc)}"
        ) from exc
    try:
        speculative(control)
    except Exception as exc:
        if "only supported" not in _rejection(exc):
            raise AssertionError(
                "SpeculativeConfig(method='eagle3') failed for the gpt2 control target, but not "
                f"with the allow-list error: {_rejection(exc)}"
            ) from exc
    else:
        raise AssertionError(
            "SpeculativeConfig accepted EAGLE-3 for a gpt2 target: the allow-list check in "
            "vllm/config/speculative.py was removed instead of widened"
        )
