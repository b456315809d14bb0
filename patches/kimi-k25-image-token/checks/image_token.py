"""Run the release's own EagleProposer for a Kimi-K2.5 target, up to the image-token branch."""

from __future__ import annotations

import importlib
from typing import Any

from vllm_patcher_checklib import checkpoints, eagle3


def _engine(ctx: Any) -> tuple[Any, Any, Any]:
    """The real target ``ModelConfig``, ``SpeculativeConfig`` (eagle3) and ``ParallelConfig``.

    Exactly what a server builds for a Kimi-K2.5 target with an EAGLE-3 drafter before any
    proposer exists; a refusal here is the finding (the proposer is then never reached).
    """
    from vllm.config import ModelConfig, ParallelConfig

    # the same tiny DeepSeek-V3 text model and Llama EAGLE-3 drafter as the eagle3-whitelist checks
    kimi = checkpoints.folder(ctx, "kimi_k25", checkpoints.KIMI_K25_CONFIG)
    try:
        target = ModelConfig(model=kimi, skip_tokenizer_init=True)
    except Exception as exc:
        raise AssertionError("not run: the kimi_k25 target ModelConfig failed") from exc
    parallel = ParallelConfig()
    drafter = checkpoints.folder(ctx, "drafter", checkpoints.DRAFTER_CONFIG)
    try:
        speculative = eagle3.speculative_config(target, drafter, parallel)
    except Exception as exc:
        raise AssertionError(
            "not run: the real SpeculativeConfig refused the kimi_k25 target "
            f"(as a server would, before any proposer exists): {eagle3.refusal(exc)}"
        ) from None
    return target, speculative, parallel


class _ReachedLanguageModel(Exception):
    """Raised by the stand-in target right after the image-token branch has run."""


def check_image_token(ctx: Any) -> str:
    """EAGLE proposer reads Kimi-K2.5's image token from media_placeholder_token_id

    From the real target ``ModelConfig``, ``SpeculativeConfig`` (method eagle3) and
    ``ParallelConfig`` for a config-only kimi_k25 checkpoint (``_engine``), the check builds the
    real ``VllmConfig`` (device ``cpu``) and the real ``EagleProposer(vllm_config, device)``, then
    calls its real ``load_model`` with a Kimi-K2.5 target carrying the real ``KimiK25Config``.
    Whatever ``__init__``, ``load_model`` and its helpers of that release read (``_get_model`` and
    ``self.speculative_config`` since 0.16.0, the draft load config since 0.17.0) comes from the
    release itself. Stood in, because they need a GPU or the checkpoint: pinned host memory
    (``is_pin_memory_available``), the checkpoint's image processor
    (``MULTIMODAL_REGISTRY.supports_multimodal_inputs``, answered from the model's own
    ``is_multimodal_model``), loading the drafter's weights (``get_model``: a module with the
    drafter's real config) and the target's language model (``get_language_model``: load_model
    asks for it right after the image-token branch, and the check stops there). Any other
    exception is reported as raised, with where.
    """
    eagle3.skip_without_kimi_k25(ctx)
    import torch
    from vllm.config import DeviceConfig, VllmConfig

    kimi = importlib.import_module(eagle3.KIMI_K25)
    eagle = importlib.import_module("vllm.v1.spec_decode.eagle")

    target_config, speculative, parallel = _engine(ctx)
    try:
        vllm_config = VllmConfig(
            model_config=target_config,
            speculative_config=speculative,
            parallel_config=parallel,
            device_config=DeviceConfig(device="cpu"),
        )
    except Exception as exc:
        raise AssertionError("VllmConfig for the Kimi-K2.5 target") from exc

    token = target_config.hf_config.media_placeholder_token_id
    drafter = torch.nn.Module()
    drafter.config = speculative.draft_model_config.hf_config
    loads: list[dict[str, Any]] = []

    def get_model(**kwargs: Any) -> Any:
        loads.append(kwargs)
        return drafter

    target = kimi.KimiK25ForConditionalGeneration.__new__(kimi.KimiK25ForConditionalGeneration)
    torch.nn.Module.__init__(target)
    target.config = target_config.hf_config

    def reached() -> Any:
        raise _ReachedLanguageModel

    target.get_language_model = reached

    class Registry:
        """vLLM's multimodal registry, except that it cannot build Kimi-K2.5's processor here.

        ``__init__`` asks it whether the target takes multimodal inputs, which builds the
        checkpoint's image processor (``preprocessor_config.json``: not in a config-only folder).
        A real Kimi-K2.5 checkpoint does take images, so the answer is the model's own
        ``is_multimodal_model``; everything else goes to the real registry.
        """

        def __init__(self, real: Any) -> None:
            self._real = real

        def supports_multimodal_inputs(self, model_config: Any) -> bool:
            return bool(model_config.is_multimodal_model)

        def __getattr__(self, attr: str) -> Any:
            return getattr(self._real, attr)

    stand_ins: dict[str, Any] = {"get_model": get_model}
    if hasattr(eagle, "MULTIMODAL_REGISTRY"):
        stand_ins["MULTIMODAL_REGISTRY"] = Registry(eagle.MULTIMODAL_REGISTRY)
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
            "load_model returned without asking the Kimi-K2.5 target for its language model"
        )
    finally:
        for attr in stand_ins:
            if attr in saved:
                setattr(eagle, attr, saved[attr])
            else:
                delattr(eagle, attr)
    if not loads:
        raise AssertionError("load_model never loaded the drafter")
    got = getattr(drafter.config, "image_token_index", None)
    if got != token:
        raise AssertionError(f"drafter image_token_index is {got}, expected {token}")
    return f"image_token_index {got}"
