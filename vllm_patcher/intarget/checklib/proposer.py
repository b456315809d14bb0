"""The release's own EAGLE proposer, driven up to the branch that gives the drafter the target's
image token: what a server does at load for a multimodal target (Kimi-K2.5, Qwen3-VL).

``drafter_image_token`` builds the real ``VllmConfig`` (device ``cpu``) from the real target
``ModelConfig`` and eagle3 ``SpeculativeConfig`` of a config-only checkpoint, the real
``EagleProposer(vllm_config, device)``, and calls its real ``load_model`` with a bare instance of
the target's class carrying the real config. Whatever ``__init__``, ``load_model`` and its helpers
of that release read comes from the release itself. Stood in, because they need a GPU or the
checkpoint: pinned host memory (``is_pin_memory_available``), the graph capture sizes 0.11.0
leaves unset on a CPU device (an empty list), the checkpoint's image processor
(``MULTIMODAL_REGISTRY.supports_multimodal_inputs``, answered from the model's own
``is_multimodal_model``), loading the drafter's weights (``get_model``: a module with the
drafter's real config) and the target's language model (``get_language_model``: ``load_model``
asks for it right after the image-token branch, and the drive stops there). Any other exception
is reported as raised, with where.
"""

from __future__ import annotations

import importlib
from typing import Any

try:  # run as a check file's library: the probe makes it importable under this name
    from vllm_patcher_checklib import checkpoints, eagle3
except ImportError:  # imported as part of vllm_patcher (its own tests import every module)
    from . import checkpoints, eagle3  # type: ignore[no-redef]


def engine(ctx: Any, name: str, config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The real target ``ModelConfig``, ``SpeculativeConfig`` (eagle3) and ``ParallelConfig`` of
    the config-only checkpoint ``name``: exactly what a server builds before any proposer exists;
    a refusal here is the finding (the proposer is then never reached)."""
    from vllm.config import ModelConfig, ParallelConfig

    folder = checkpoints.folder(ctx, name, config)
    try:
        target = ModelConfig(model=folder, skip_tokenizer_init=True)
    except Exception as exc:
        raise AssertionError(f"not run: the {name} target ModelConfig failed") from exc
    parallel = ParallelConfig()
    drafter = checkpoints.folder(ctx, "drafter", checkpoints.DRAFTER_CONFIG)
    try:
        speculative = eagle3.speculative_config(target, drafter, parallel)
    except Exception as exc:
        raise AssertionError(
            f"not run: the real SpeculativeConfig refused the {name} target "
            f"(as a server would, before any proposer exists): {eagle3.refusal(exc)}"
        ) from None
    return target, speculative, parallel


class _ReachedLanguageModel(Exception):
    """Raised by the stand-in target right after the image-token branch has run."""


class _Registry:
    """vLLM's multimodal registry, except that it cannot build the checkpoint's processor here
    (``preprocessor_config.json`` is not in a config-only folder): a real multimodal checkpoint
    takes images, so the answer is the model's own ``is_multimodal_model``."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def supports_multimodal_inputs(self, model_config: Any) -> bool:
        return bool(model_config.is_multimodal_model)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)


def drafter_image_token(
    ctx: Any, target_class: Any, configs: tuple[Any, Any, Any], what: str
) -> Any:
    """The ``image_token_index`` the release's ``EagleProposer.load_model`` gives the drafter of
    a ``target_class`` target built from ``configs`` (``engine``'s three); ``what`` names the
    target in a finding."""
    import torch
    from vllm.config import DeviceConfig, VllmConfig

    eagle = importlib.import_module("vllm.v1.spec_decode.eagle")
    target_config, speculative, parallel = configs
    try:
        vllm_config = VllmConfig(
            model_config=target_config,
            speculative_config=speculative,
            parallel_config=parallel,
            device_config=DeviceConfig(device="cpu"),
        )
    except Exception as exc:
        raise AssertionError(f"VllmConfig for the {what} target") from exc

    compilation = vllm_config.compilation_config
    if getattr(compilation, "cudagraph_capture_sizes", ()) is None:
        compilation.cudagraph_capture_sizes = []  # 0.11.0 on a CPU device: never worked out
    drafter = torch.nn.Module()
    drafter.config = speculative.draft_model_config.hf_config
    loads: list[dict[str, Any]] = []

    def get_model(**kwargs: Any) -> Any:
        loads.append(kwargs)
        return drafter

    target = eagle3.bare(target_class)
    target.config = target_config.hf_config

    def reached() -> Any:
        raise _ReachedLanguageModel

    target.get_language_model = reached
    stand_ins: dict[str, Any] = {"get_model": get_model}
    if hasattr(eagle, "MULTIMODAL_REGISTRY"):
        stand_ins["MULTIMODAL_REGISTRY"] = _Registry(eagle.MULTIMODAL_REGISTRY)
    if hasattr(eagle, "is_pin_memory_available"):
        stand_ins["is_pin_memory_available"] = lambda: False
    saved = {attr: getattr(eagle, attr) for attr in stand_ins if hasattr(eagle, attr)}
    for attr, value in stand_ins.items():
        setattr(eagle, attr, value)
    stage = "EagleProposer.__init__"
    try:
        proposer = eagle.EagleProposer(vllm_config, torch.device("cpu"), runner=None)
        stage = "EagleProposer.load_model"
        proposer.load_model(target)
    except _ReachedLanguageModel:
        pass
    except Exception as exc:  # what the release raised is the finding
        if "model parallel group is not initialized" in str(exc) and ctx.upstream:
            ctx.skip(
                f"vLLM {ctx.version} has this change upstream, and its "
                f"{stage} needs an initialised tensor-parallel group before it reaches the "
                "image-token branch, which this check cannot stand in for"
            )
        raise AssertionError(f"{stage} raised") from exc
    else:
        raise AssertionError(
            f"load_model returned without asking the {what} target for its language model"
        )
    finally:
        for attr in stand_ins:
            if attr in saved:
                setattr(eagle, attr, saved[attr])
            else:
                delattr(eagle, attr)
    if not loads:
        raise AssertionError("load_model never loaded the drafter")
    return getattr(drafter.config, "image_token_index", None)
