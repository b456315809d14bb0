"""Import and behaviour checks, run as a script inside the target environment's interpreter.

Standalone on purpose: it needs only the standard library, torch and the vLLM under test, so it
works when vllm-patcher is installed somewhere else (``--python``). Reads a JSON request from
argv[1] and prints one JSON report as the last line of stdout.
"""

# mypy: disable-error-code="misc"
from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
import traceback
from types import SimpleNamespace
from typing import Any

CHECKS: list[dict[str, Any]] = []


def record(tier: str, name: str, ok: bool, detail: str = "") -> bool:
    CHECKS.append({"tier": tier, "name": name, "ok": bool(ok), "detail": detail})
    return ok


def where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    site = [f for f in frames if "/vllm/" in f.filename] or frames
    loc = ""
    if site:
        frame = site[-1]
        loc = f" at {frame.filename}:{frame.lineno} in {frame.name}"
        if frame.line:
            loc += f" (`{frame.line.strip()}`)"
    if isinstance(exc, SyntaxError):
        loc = f" at {exc.filename}:{exc.lineno}"
    return f"{type(exc).__name__}: {exc}{loc}"


def check_imports(modules: list[str]) -> dict[str, Any]:
    loaded = {}
    for name in modules:
        try:
            loaded[name] = importlib.import_module(name)
            record("import", name, True)
        except BaseException as exc:  # noqa: BLE001 - any failure here is the finding
            record("import", name, False, where(exc))
    return loaded


def check_interfaces(ds: Any, kimi: Any | None) -> None:
    from vllm.model_executor.models.interfaces import supports_eagle3

    classes = [ds.DeepseekV2ForCausalLM, ds.DeepseekV3ForCausalLM]
    if kimi is not None:
        classes.append(kimi.KimiK25ForConditionalGeneration)
    for cls in classes:
        ok = supports_eagle3(cls)
        record(
            "behaviour",
            f"supports_eagle3({cls.__name__})",
            ok,
            ""
            if ok
            else f"{cls.__name__} does not list SupportsEagle3; the runner refuses EAGLE-3",
        )


def _bare(cls: Any) -> Any:
    import torch

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def check_default_layers(ds: Any) -> None:
    import torch

    lm = _bare(ds.DeepseekV2ForCausalLM)
    lm.model = _bare(ds.DeepseekV2Model)
    lm.model.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(61)])
    lm.model.aux_hidden_state_layers = ()
    try:
        got = tuple(lm.get_eagle3_aux_hidden_state_layers())
        lm.set_aux_hidden_state_layers((3, 31, 59))
        stored = tuple(lm.model.aux_hidden_state_layers)
    except BaseException as exc:  # noqa: BLE001
        record("behaviour", "DeepseekV2ForCausalLM EAGLE-3 methods", False, where(exc))
        return
    record(
        "behaviour",
        "default aux layers for 61 layers",
        got == (2, 30, 58),
        f"got {got}, expected (2, 30, 58)",
    )
    record(
        "behaviour",
        "set_aux_hidden_state_layers reaches DeepseekV2Model",
        stored == (3, 31, 59),
        f"model.aux_hidden_state_layers is {stored} after setting (3, 31, 59)",
    )


def check_forward(ds: Any, layer0: bool = True) -> None:
    """Drive the installed DeepseekV2Model.forward with stand-in layers, norm and PP group.

    ``layer0`` asks for the first layer too, where ``residual`` is still None. Our patch handles
    it; upstream 0.18.0 adds ``hidden_states + residual`` there, so on upstream releases the check
    uses layers 1, 3, 5 instead of failing every deployment that never asks for layer 0.
    """
    import torch

    # the IntermediateTensors deepseek_v2 itself imports (vllm.sequence in every release so far)
    intermediate_tensors: Any = getattr(ds, "IntermediateTensors", None)
    if intermediate_tensors is None:
        import vllm.sequence

        intermediate_tensors = vllm.sequence.IntermediateTensors

    class Layer(torch.nn.Module):
        def __init__(self, index: int, seen: dict[int, torch.Tensor]) -> None:
            super().__init__()
            self.index, self.seen = index, seen

        def forward(self, positions: Any, hidden: torch.Tensor, residual: Any, *rest: Any) -> Any:
            entering = hidden if residual is None else hidden + residual
            self.seen[self.index] = entering.clone()
            return entering * 0.5 + (self.index + 1), entering

    class Missing(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            raise AssertionError("a layer outside [start_layer, end_layer) was run")

    class Norm(torch.nn.Module):
        def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> Any:
            return hidden + residual, hidden + residual

    def run(first_rank: bool, start: int, aux: tuple[int, ...]) -> tuple[Any, dict[int, Any]]:
        n = 6
        seen: dict[int, torch.Tensor] = {}
        model = _bare(ds.DeepseekV2Model)
        model.config = SimpleNamespace()
        model.layers = torch.nn.ModuleList(
            [Missing() if i < start else Layer(i, seen) for i in range(n)]
        )
        model.start_layer, model.end_layer = start, n
        model.norm = Norm()
        model.aux_hidden_state_layers = aux
        pp = SimpleNamespace(
            is_first_rank=first_rank,
            is_last_rank=True,
            world_size=1,
            rank_in_group=0 if first_rank else 1,
        )
        original = ds.get_pp_group
        ds.get_pp_group = lambda: pp
        try:
            torch.manual_seed(0)
            embeds = torch.randn(3, 8)
            inter = None
            if not first_rank:
                inter = intermediate_tensors({"hidden_states": embeds, "residual": embeds * 2})
            out = type(model).forward(
                model,
                torch.zeros(3, dtype=torch.long),
                torch.arange(3),
                inter,
                inputs_embeds=embeds,
            )
        finally:
            ds.get_pp_group = original
        return out, seen

    try:
        plain, _ = run(True, 0, ())
        if not record(
            "behaviour",
            "forward without aux layers returns the plain tensor",
            isinstance(plain, torch.Tensor),
            f"got {type(plain).__name__}",
        ):
            return
        wanted = (0, 3, 5) if layer0 else (1, 3, 5)
        out, seen = run(True, 0, wanted)
        ok = isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list)
        if not record(
            "behaviour",
            "forward with aux layers returns (hidden, aux)",
            ok,
            f"got {type(out).__name__}; the aux capture in DeepseekV2Model.forward is missing",
        ):
            return
        hidden, aux = out
        same = len(aux) == 3 and all(
            torch.equal(a, seen[i]) for a, i in zip(aux, wanted, strict=True)
        )
        record(
            "behaviour",
            "aux states equal the residual stream entering layers "
            + ", ".join(str(i) for i in wanted),
            same,
            "aux tensors differ from the residual stream entering the requested layers",
        )
        record(
            "behaviour",
            "final hidden state unchanged by aux capture",
            torch.equal(hidden, plain),
            "capturing aux states changed the model output",
        )
        out, seen = run(False, 2, (1, 2, 4))
        ok = (
            isinstance(out, tuple)
            and len(out[1]) == 2
            and all(torch.equal(a, seen[i]) for a, i in zip(out[1], (2, 4), strict=True))
        )
        record(
            "behaviour",
            "pipeline stage from layer 2 captures absolute layers 2 and 4",
            ok,
            "aux indices are not counted from start_layer",
        )
    except BaseException as exc:  # noqa: BLE001
        record("behaviour", "DeepseekV2Model.forward probe", False, where(exc))


def check_kimi_delegation(ds: Any, kimi: Any) -> None:
    import torch

    inner = _bare(ds.DeepseekV2Model)
    inner.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(61)])
    inner.aux_hidden_state_layers = ()
    model = _bare(kimi.KimiK25ForConditionalGeneration)
    # 0.16 and later build the language model with init_vllm_registered_model as a
    # DeepseekV2ForCausalLM; 0.15.x builds a bare DeepseekV2Model.
    if hasattr(kimi, "init_vllm_registered_model"):
        lm = _bare(ds.DeepseekV2ForCausalLM)
        lm.model = inner
        model.language_model = lm
    else:
        model.language_model = inner
    try:
        model.set_aux_hidden_state_layers((3, 31, 59))
        got = tuple(model.get_eagle3_aux_hidden_state_layers())
    except BaseException as exc:  # noqa: BLE001
        record(
            "behaviour",
            "KimiK25ForConditionalGeneration delegates EAGLE-3 methods",
            False,
            where(exc),
        )
        return
    ok = tuple(inner.aux_hidden_state_layers) == (3, 31, 59) and got == (2, 30, 58)
    record(
        "behaviour",
        "KimiK25ForConditionalGeneration delegates EAGLE-3 methods",
        ok,
        f"language model aux layers {tuple(inner.aux_hidden_state_layers)}, default {got}",
    )


class _ReachedLanguageModel(Exception):
    """Raised by the stand-in target right after the image-token branch has run."""


def check_image_token(eagle: Any, kimi: Any, engine: dict[str, Any]) -> None:
    """Run the release's own EagleProposer for a Kimi-K2.5 target, up to the image-token branch.

    ``engine`` holds the real target ``ModelConfig``, ``SpeculativeConfig`` (method eagle3) and
    ``ParallelConfig`` that ``check_speculative_config`` built for the kimi_k25 target. From them
    the probe builds the real ``VllmConfig`` (device ``cpu``) and the real
    ``EagleProposer(vllm_config, device)``, then calls its real ``load_model`` with a Kimi-K2.5
    target carrying the real ``KimiK25Config``. Whatever ``__init__``, ``load_model`` and its
    helpers of that release read (``_get_model`` and ``self.speculative_config`` since 0.16.0, the
    draft load config since 0.17.0) comes from the release itself. Stood in, because they need a
    GPU or the checkpoint: pinned host memory (``is_pin_memory_available``), the checkpoint's
    image processor (``MULTIMODAL_REGISTRY.supports_multimodal_inputs``, answered from the model's
    own ``is_multimodal_model``), loading the drafter's weights (``get_model``: a module with the
    drafter's real config) and the target's language model (``get_language_model``: load_model
    asks for it right after the image-token branch, and the probe stops there). Any other
    exception is reported as raised, with where.
    """
    import torch

    name = "EAGLE proposer reads Kimi-K2.5's image token from media_placeholder_token_id"
    if engine.get("error"):
        record("behaviour", name, False, f"not run: {engine['error']}")
        return
    from vllm.config import DeviceConfig, VllmConfig

    target_config, speculative, parallel = (
        engine["model_config"],
        engine["speculative_config"],
        engine["parallel_config"],
    )
    try:
        vllm_config = VllmConfig(
            model_config=target_config,
            speculative_config=speculative,
            parallel_config=parallel,
            device_config=DeviceConfig(device="cpu"),
        )
    except BaseException as exc:  # noqa: BLE001
        record("behaviour", name, False, f"VllmConfig for the Kimi-K2.5 target: {where(exc)}")
        return

    token = target_config.hf_config.media_placeholder_token_id
    drafter = torch.nn.Module()
    drafter.config = speculative.draft_model_config.hf_config
    loads: list[dict[str, Any]] = []

    def get_model(**kwargs: Any) -> Any:
        loads.append(kwargs)
        return drafter

    target = _bare(kimi.KimiK25ForConditionalGeneration)
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
        record(
            "behaviour",
            name,
            False,
            "load_model returned without asking the Kimi-K2.5 target for its language model",
        )
    except _ReachedLanguageModel:
        got = getattr(drafter.config, "image_token_index", None)
        if not loads:
            record("behaviour", name, False, "load_model never loaded the drafter")
        else:
            record(
                "behaviour",
                name,
                got == token,
                f"drafter image_token_index is {got}, expected {token}",
            )
    except BaseException as exc:  # noqa: BLE001 - what the release raised is the finding
        record("behaviour", name, False, f"{stage} raised {where(exc)}")
    finally:
        for attr, value in saved.items():
            setattr(eagle, attr, value)


TEXT_CONFIG = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}


def check_speculative_config(with_kimi: bool, root: str) -> dict[str, Any]:
    """The real SpeculativeConfig on tiny local config folders under ``root``.

    Returns what it built for the kimi_k25 target (``model_config``, ``speculative_config``,
    ``parallel_config``), or ``error`` saying why there is nothing: the image-token probe drives
    the proposer with exactly the engine config a server would build.
    """
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    kimi_engine: dict[str, Any] = {"error": "no kimi_k25 target in this release"}

    def write(name: str, cfg: dict[str, Any]) -> str:
        path = os.path.join(root, name)
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        return path

    drafter = write(
        "drafter",
        {
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
        },
    )
    targets = {"deepseek_v3": (write("deepseek_v3", TEXT_CONFIG), True)}
    if with_kimi:
        targets["kimi_k25"] = (
            write(
                "kimi_k25",
                {
                    "model_type": "kimi_k25",
                    "architectures": ["KimiK25ForConditionalGeneration"],
                    "text_config": TEXT_CONFIG,
                    "vision_config": {},
                    "media_placeholder_token_id": 163605,
                    "torch_dtype": "bfloat16",
                },
            ),
            True,
        )
    targets["gpt2 (not on the list)"] = (
        write(
            "gpt2",
            {
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "n_embd": 256,
                "n_layer": 2,
                "n_head": 4,
                "vocab_size": 1024,
                "n_positions": 1024,
                "torch_dtype": "float16",
            },
        ),
        False,
    )
    for label, (path, should_accept) in targets.items():
        name = f"SpeculativeConfig eagle3 {'accepts' if should_accept else 'rejects'} {label}"
        try:
            target = ModelConfig(model=path, skip_tokenizer_init=True)
        except BaseException as exc:  # noqa: BLE001
            record(
                "behaviour",
                name,
                False,
                f"could not build the target ModelConfig: {where(exc)}",
            )
            if label == "kimi_k25":
                kimi_engine = {"error": f"the kimi_k25 target ModelConfig failed: {where(exc)}"}
            continue
        try:
            parallel = ParallelConfig()
            speculative = SpeculativeConfig(
                method="eagle3",
                model=drafter,
                num_speculative_tokens=3,
                target_model_config=target,
                target_parallel_config=parallel,
            )
            accepted, why = True, ""
            if label == "kimi_k25":
                kimi_engine = {
                    "model_config": target,
                    "speculative_config": speculative,
                    "parallel_config": parallel,
                }
        except BaseException as exc:  # noqa: BLE001
            accepted, why = (
                False,
                str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc),
            )
            text = str(exc)
            if not should_accept or "only supported" in text:
                why = " ".join(text.split())[:300]
            if label == "kimi_k25":
                kimi_engine = {
                    "error": "the real SpeculativeConfig refused the kimi_k25 target "
                    f"(as a server would, before any proposer exists): {why}"
                }
        if should_accept:
            record("behaviour", name, accepted, f"rejected: {why}")
        else:
            record(
                "behaviour",
                name,
                not accepted and "only supported" in why,
                "accepted a family the allow-list should still reject"
                if accepted
                else f"failed: {why}",
            )
    return kimi_engine


def main() -> None:
    request = json.loads(sys.argv[1])
    modules = request["modules"]
    loaded = check_imports(modules)
    ds = loaded.get("vllm.model_executor.models.deepseek_v2")
    kimi = loaded.get("vllm.model_executor.models.kimi_k25")
    with_kimi = "vllm.model_executor.models.kimi_k25" in modules
    if request.get("behaviour", True):
        if ds is None or (with_kimi and kimi is None) or "vllm.config.speculative" not in loaded:
            record("behaviour", "behaviour checks", False, "not run: an import failed")
        else:
            check_interfaces(ds, kimi)
            check_default_layers(ds)
            check_forward(ds, layer0=request.get("layer0", True))
            if kimi is not None:
                check_kimi_delegation(ds, kimi)
            root = tempfile.mkdtemp(prefix="vllm-patcher-probe-")
            try:
                kimi_engine = check_speculative_config(with_kimi, root)
                eagle = loaded.get("vllm.v1.spec_decode.eagle")
                if kimi is not None and eagle is not None:
                    check_image_token(eagle, kimi, kimi_engine)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    sys.stdout.write("\n" + json.dumps({"checks": CHECKS}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
