"""The behaviour checks every family backport gets from its ``[family]`` table, for free.

``verify`` runs this file as a check file of each family patch (``patch.toml``'s ``[family]``,
read by ``catalogue/family.py``), with the family's description as ``ctx.family``. For each of the
family's model classes the installed release ships, on the real classes with stand-in layers
(``eagle3``): the causal LM implements ``SupportsEagle3`` with a working default and setter; its
inner model's forward returns ``(hidden, aux)``, one tensor per requested layer, each the residual
stream (after the last layer too, normed the way the model norms, where the release captures
through ``EagleModelMixin``). Then, where the release has the EAGLE-3 allow-list, the real
``SpeculativeConfig`` accepts a tiny target of each of the family's model types, and refuses one
whose name only contains it (the entry is exact).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from typing import Any

try:  # run as a check file: the probe makes the library importable under this name
    from vllm_patcher_checklib import checkpoints, eagle3
except ImportError:  # imported as part of vllm_patcher (its own tests import every module)
    from . import checkpoints, eagle3  # type: ignore[no-redef]

LLAMA = "vllm.model_executor.models.llama"
# the first layer asked for: upstream's own captures (Llama's, HunYuan's from 0.16.0) add a
# residual that is still None before layer 0, and a family check drives upstream's classes too
FIRST = 1
STYLES = {"stream": "residual", "hidden": "plain"}


def _models(ctx: Any) -> list[tuple[Any, dict[str, Any]]]:
    """(module, description) of each family model whose file this release ships."""
    out, unloadable = [], []
    for model in ctx.family["models"]:
        if importlib.util.find_spec(model["module"]) is None:
            continue
        missing = getattr(ctx, "unloadable", {}).get(model["module"])
        if missing is not None:  # the import tier did not judge it: a package this lacks
            unloadable.append(f"{model['causal_lm']} ({missing} is not installed)")
            continue
        out.append((eagle3.model_module(ctx, model["module"]), model))
    if not out:
        names = ", ".join(m["module"] for m in ctx.family["models"]) or "none"
        why = f"cannot load {', '.join(unloadable)}" if unloadable else f"ships none of ({names})"
        ctx.skip(f"vLLM {ctx.version} {why}: none of the family's model classes to drive")
    return out


def _inner(module: Any, name: str, model: dict[str, Any] | None = None) -> Any:
    """The inner model class: in the entry's ``model_module`` (another entry's file, for a
    multimodal wrapper), else in the family's module, else in llama.py (phi3, glm, ernie4_5)."""
    home = (model or {}).get("model_module")
    if home and home != module.__name__:
        module = importlib.import_module(home)
    found = getattr(module, name, None)
    if found is None:
        found = getattr(importlib.import_module(LLAMA), name, None)
    if found is None:
        raise RuntimeError(f"{module.__name__} has no class {name}, nor has {LLAMA}")
    return found


def _family(ctx: Any, model: dict[str, Any]) -> Any:
    return eagle3.Family(
        ctx.family["name"],
        model["causal_lm"],
        model["model"],
        num_layers=40,
        wanted=(3, 21, 38),
        style=STYLES[model["capture"]],
        config=model["config"],
        inner=model["inner"],
    )


def check_supports_eagle3(ctx: Any) -> str:
    """The family's causal LM implements SupportsEagle3 with working default and setter."""
    done = []
    for module, model in _models(ctx):
        shim = _Shim(module, model["model"], _inner(module, model["model"], model))
        eagle3.implements_supports_eagle3(shim, _family(ctx, model))
        done.append(model["causal_lm"])
    return ", ".join(done)


def check_capture_is_the_residual_stream(ctx: Any) -> str:
    """The inner model's forward returns (hidden, aux), each aux state the residual stream."""
    done: list[str] = []
    for module, model in _models(ctx):
        cls = _inner(module, model["model"], model)
        if cls.__name__ in done:
            continue  # a wrapper's inner model: its own entry drove it
        # a backport's own capture of a layer that adds its own residual must be a tensor of
        # its own; upstream's classes are judged for the stream alone
        own = model["capture"] == "hidden" and not ctx.upstream
        eagle3.forward_captures_aux(module, _family(ctx, model), cls, FIRST, own)
        done.append(cls.__name__)
    return ", ".join(done)


class _Shim:
    """``module`` with ``name`` resolved to ``cls`` (an inner model from llama.py)."""

    def __init__(self, module: Any, name: str, cls: Any) -> None:
        self._module, self._name, self._cls = module, name, cls

    def __getattr__(self, attr: str) -> Any:
        return self._cls if attr == self._name else getattr(self._module, attr)


# --- the allow-list ---------------------------------------------------------------------------

CONFIGURATION = """
from transformers.configuration_utils import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = {model_type!r}

    def __init__(self, vocab_size=1024, hidden_size=256, intermediate_size=512,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                 max_position_embeddings=4096, rms_norm_eps=1e-6, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        super().__init__(**kwargs)
"""


def _list_entries() -> list[str]:
    """The allow-list's strings, read from the installed SpeculativeConfig's source."""
    source = inspect.getsource(importlib.import_module("vllm.config.speculative"))
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("eagle3_target_supported", "aux_hidden_states_supported")
            and isinstance(node.value, ast.List)
        ):
            return [
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    return []


def _target(ctx: Any, model_type: str) -> Any:
    """The real ModelConfig of a tiny ``model_type`` target whose config class arrives through
    ``auto_map`` (any model type, whether or not this transformers knows it)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": model_type,
        "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig"},
        "torch_dtype": "bfloat16",
        **ctx.family.get("target", {}),
    }
    path = checkpoints.folder(
        ctx,
        f"{model_type}_target",
        config,
        {"configuration_tiny.py": CONFIGURATION.format(model_type=model_type)},
    )
    built = eagle3.model_config(path, f"a tiny {model_type} target", trust_remote_code=True)
    got = built.hf_text_config.model_type
    if got != model_type:
        raise RuntimeError(
            f"the tiny {model_type} target loaded with model_type {got!r}; "
            "the check cannot judge the allow-list"
        )
    return built


def check_speculative_config_accepts(ctx: Any) -> str:
    """The real SpeculativeConfig accepts EAGLE-3 for the family's model types, exactly."""
    eagle3.skip_without_allow_list(ctx)
    drafter = checkpoints.folder(ctx, "eagle3_drafter", checkpoints.DRAFTER_CONFIG)
    entries = _list_entries()
    done = []
    with checkpoints.private_remote_code_cache(ctx.workdir):
        for model_type in ctx.family["model_types"]:
            eagle3.accepts(
                _target(ctx, model_type),
                drafter,
                model_type,
                f"the allow-list check in vllm/config/speculative.py does not admit {model_type!r}",
            )
            done.append(model_type)
            control = f"{model_type}_unlisted"
            if any(entry in control for entry in entries):
                continue  # an entry of the list admits it: no exactness to judge
            eagle3.refuses(
                _target(ctx, control),
                drafter,
                control,
                f": the allow-list admits every model_type containing {model_type!r}, "
                f"not {model_type!r} exactly",
            )
    return "accepted " + ", ".join(done)
