"""The aux-layer rules of each vLLM release: which key of the drafter's config it reads, and what
it captures when none is there.

Two conventions for an aux layer id ``i``: vLLM captures the residual stream *entering* layer
``i``; SGLang and SpecForge name the *output* of layer ``i`` (SGLang captures at ``i + 1``). So an
id in SpecForge's convention is ``i + 1`` in vLLM's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import BadSetting
from ..models.configs import AUX_KEY, NESTED_KEY, int_list
from ..releases import release_of

# What --fix writes is either read from the drafter's own config (known) or vLLM's default put
# there because nothing in the config says which layers the drafter was trained on (guessed).
KNOWN, GUESSED = "known", "guessed"


# 0.11.0 always asks the model for its default; 0.11.1 added the top-level key; 0.22.0 also
# falls back to the nested key SpecForge writes, without shifting it.
READS_TOP_LEVEL_FROM = Version("0.11.1")


READS_NESTED_FROM = Version("0.22.0")


@dataclass(frozen=True)
class AuxLayerPlan:
    """Which aux layers vLLM will capture for this drafter, and where that choice came from."""

    vllm_ids: tuple[int, ...]  # residual stream entering layer i (vLLM's convention)
    source: str  # top-level | nested | default
    default: tuple[int, ...]
    top_level: tuple[int, ...] | None  # as declared, vLLM's convention
    nested: tuple[int, ...] | None  # as declared, SpecForge's convention (layer outputs)
    trained_ids: tuple[int, ...] | None  # what the drafter expects, in vLLM's convention
    write_ids: tuple[int, ...] | None  # the top-level value ``--fix`` writes, if any
    write_basis: str | None = None  # KNOWN or GUESSED, with write_ids
    write_based_on: str | None = None  # where the value comes from, or what the guess rests on

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The same layers in SGLang/SpecForge's convention: output of layer i."""
        return tuple(i - 1 for i in self.vllm_ids)

    def to_dict(self) -> dict[str, object]:
        def listed(ids: tuple[int, ...] | None) -> list[int] | None:
            return None if ids is None else list(ids)

        return {
            "vllm_ids": list(self.vllm_ids),
            "sglang_ids": list(self.output_ids),
            "source": self.source,
            "default": list(self.default),
            "top_level": listed(self.top_level),
            "nested": listed(self.nested),
            "trained_vllm_ids": listed(self.trained_ids),
            "fix_top_level": listed(self.write_ids),
            "fix_basis": self.write_basis,
            "fix_based_on": self.write_based_on,
        }


def release_version(version: str) -> Version:
    """The release a version names (0.15.1 for 0.15.1+cpu); a usage error when it names none."""
    try:
        return release_of(version)
    except InvalidVersion:
        raise BadSetting(
            f"--vllm-version {version!r} is not a vLLM release version (like 0.15.1)"
        ) from None


def reads_top_level_key(version: str) -> bool:
    return release_version(version) >= READS_TOP_LEVEL_FROM


def reads_nested_key(version: str) -> bool:
    return release_version(version) >= READS_NESTED_FROM


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """vLLM's default aux layers for a target of ``num_layers`` decoder layers.

    What a DeepSeek-V3-family model answers to get_eagle3_aux_hidden_state_layers(), and what
    vLLM's SupportsEagle3 default (0.18.0 and later) answers for MiniMax-M2: the same formula.
    """
    return (2, num_layers // 2, num_layers - 3)


def _declared_ids(value: object) -> tuple[int, ...] | None:
    # vLLM takes the key only when it is a non-empty list or tuple; anything else means "absent"
    if isinstance(value, list) and value and int_list(value):
        return tuple(value)
    return None


def nested_value(config: dict[str, Any]) -> object:
    eagle = config.get("eagle_config")
    return eagle.get(AUX_KEY) if isinstance(eagle, dict) else None


def aux_layer_plan(config: dict[str, Any], num_layers: int, vllm_version: str) -> AuxLayerPlan:
    """The aux layers ``vllm_version`` will capture for a drafter with this config."""
    top = _declared_ids(config.get(AUX_KEY))
    nested = _declared_ids(nested_value(config))
    default = default_aux_layers(num_layers)
    if top is not None and reads_top_level_key(vllm_version):
        used, source = top, "top-level"
    elif nested is not None and reads_nested_key(vllm_version):
        used, source = nested, "nested"
    else:
        used, source = default, "default"
    if top is not None:
        trained: tuple[int, ...] | None = top
    elif nested is not None:
        trained = tuple(i + 1 for i in nested)
    else:
        trained = None
    invalid_top = config.get(AUX_KEY) not in (None, []) and top is None
    write = _ids_to_write(top, invalid_top, nested, num_layers, vllm_version)
    ids, basis, based_on = write if write is not None else (None, None, None)
    return AuxLayerPlan(used, source, default, top, nested, trained, ids, basis, based_on)


def in_range(ids: tuple[int, ...], num_layers: int) -> bool:
    return all(0 <= i < num_layers for i in ids)


def _ids_to_write(
    top: tuple[int, ...] | None,
    invalid_top: bool,
    nested: tuple[int, ...] | None,
    num_layers: int,
    vllm_version: str,
) -> tuple[tuple[int, ...], str, str] | None:
    """The top-level value ``--fix`` writes, KNOWN or GUESSED, and what it rests on."""
    # Only worth writing where the release reads it; an explicit, in-range top-level key is the
    # author's word and stays, even if it disagrees with the nested one.
    if not reads_top_level_key(vllm_version):
        return None
    if top is not None and in_range(top, num_layers):
        return None
    if nested is not None:
        shifted = tuple(i + 1 for i in nested)
        if not in_range(shifted, num_layers):
            return None
        return (
            shifted,
            KNOWN,
            f"the drafter's {NESTED_KEY} {show_ids(nested)}, SpecForge layer outputs, "
            "+1 into vLLM's convention",
        )
    if top is not None or invalid_top:
        # Nothing in the config says which layers the drafter was trained on: vLLM's default is
        # the likeliest (the layers EAGLE-3 recipes take), never a fact.
        default = default_aux_layers(num_layers)
        what = (
            f"{show_ids(top)} lies outside [0, {num_layers})" if top is not None else "is unusable"
        )
        return (
            default,
            GUESSED,
            f"vLLM's default (2, n // 2, n - 3) for the target's {num_layers} layers: the top-level "
            f"{AUX_KEY} {what} and nothing else in the config names the layers the drafter "
            "was trained on",
        )
    return None


def show_ids(ids: tuple[int, ...] | None) -> str:
    return "none" if ids is None else "[" + ", ".join(str(i) for i in ids) + "]"
