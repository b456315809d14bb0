"""doctor's checks for a drafter that loads and runs but will rarely be accepted, each
read from the two checkpoints before any weight is loaded:

- ``d2t``: a drafter with a draft vocabulary smaller than the target's maps each draft id to a
  target id through its ``d2t`` tensor, which vLLM reads as offsets (``target = draft +
  d2t[draft]``). A converter that wrote absolute target ids makes nearly every drafted token
  wrong. The tensor is read from the safetensors bytes (no torch): offsets of a sorted id map
  never decrease, and repeat wherever consecutive draft ids map to consecutive target ids;
  absolute ids are each at least their index and never repeat. Every mapped id must fall inside
  the target's vocabulary.
- ``positions``: the drafter trained on a shorter context than the target serves, or with other
  rope scaling (Kimi-K2.5's YaRN): past its range its positions are not the target's, and
  acceptance falls on long contexts.
- ``trained-for``: the drafter's config states the layer count of the target it was trained on
  (``target_num_hidden_layers``, top level or under ``eagle_config``, as TorchSpec and DFlash
  exports write it) and it is not this target's: a drafter for another size of the family, whose
  aux layers may well be in range and still the wrong features.
"""

from __future__ import annotations

import json
from typing import Any

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import DrafterModel, TargetModel, positive_int


def check_acceptance(
    drafter: DrafterModel, target: TargetModel, served_len: int | None = None
) -> list[Finding]:
    """``served_len``: the ``--max-model-len`` the server will run with, when known."""
    out = []
    d2t = check_d2t(drafter, target)
    if d2t is not None:
        out.append(d2t)
    out += check_positions(drafter, target, served_len)
    out += check_trained_for(drafter, target)
    return out


TRAINED_FOR_KEY = "target_num_hidden_layers"


def check_trained_for(drafter: DrafterModel, target: TargetModel) -> list[Finding]:
    """Nothing when the drafter does not say which target it was trained on."""
    eagle = drafter.config.get("eagle_config")
    places: dict[str, object] = {"top level": drafter.config.get(TRAINED_FOR_KEY)}
    if isinstance(eagle, dict):
        places["eagle_config"] = eagle.get(TRAINED_FOR_KEY)
    declared = {where: v for where, v in places.items() if v is not None}
    if not declared:
        return []
    counts = [v for v in declared.values() if isinstance(v, int) and not isinstance(v, bool)]
    if len(counts) != len(declared) or len(set(counts)) != 1 or counts[0] <= 0:
        shown = ", ".join(f"{w} {json.dumps(v)}" for w, v in declared.items())
        return [
            Finding(
                "trained-for",
                WARNING,
                f"the drafter's {TRAINED_FOR_KEY} ({shown}) is not one whole number of layers: "
                "the target it was trained on is not checked",
                f"state it once, as the trained target's layer count ({target.num_layers} for "
                "this one)",
            )
        ]
    stated = counts[0]
    if stated != target.num_layers:
        return [
            Finding(
                "trained-for",
                PROBLEM,
                f"the drafter was trained on a target of {stated} layers ({TRAINED_FOR_KEY} "
                f"in its config), this target has {target.num_layers}: its aux layers are "
                "another model's features, and few drafts will be accepted",
                f"use a drafter trained for this target ({target.num_layers} layers)",
            )
        ]
    return [
        Finding(
            "trained-for",
            OK,
            f"the drafter was trained on a target of {stated} layers, as this one has",
        )
    ]


def check_d2t(drafter: DrafterModel, target: TargetModel) -> Finding | None:
    """None when there is no d2t to read (the draft-vocab check says why)."""
    tensor = drafter.tensors.get("d2t")
    if tensor is None or len(tensor.shape) != 1 or not tensor.shape[0]:
        return None
    values = tensor.integers()
    if values is None:  # never a silent pass: say what could not be read
        return Finding(
            "d2t",
            WARNING,
            f"d2t ({tensor.dtype}, {tensor.shape[0]} values) could not be read as an id map "
            "(not an integer dtype, or values that are not whole numbers): not checked",
        )
    vocab = target.vocab_size
    mapped = [i + v for i, v in enumerate(values)]
    outside = [i for i, t in enumerate(mapped) if not 0 <= t < vocab]
    absolute = len(values) > 1 and all(
        v >= i and (i == 0 or v > values[i - 1]) for i, v in enumerate(values)
    )
    if absolute and all(0 <= v < vocab for v in values):
        return Finding(
            "d2t",
            PROBLEM,
            f"d2t holds absolute target ids ({values[0]}, {values[1]}, ... {values[-1]}: each at "
            "least its index, none repeated), but vLLM adds d2t[i] to draft id i as an offset: "
            "nearly every drafted token maps to the wrong target token",
            f"re-export the drafter with offsets: d2t[i] = target_id[i] - i (in {drafter.path})",
        )
    if outside:
        first = outside[0]
        return Finding(
            "d2t",
            PROBLEM,
            f"d2t maps {len(outside)} draft id(s) outside the target's vocabulary of {vocab} "
            f"(draft id {first} -> {mapped[first]}, as vLLM reads it: id + d2t[id])",
            "re-export the drafter with this target's tokenizer and d2t as offsets",
        )
    if len(set(mapped)) < len(mapped):
        return Finding(
            "d2t",
            WARNING,
            f"d2t maps {len(mapped) - len(set(mapped))} draft id(s) onto a target id another "
            "draft id has: those draft tokens can never be told apart",
        )
    return Finding(
        "d2t",
        OK,
        f"d2t: {len(values)} offsets, every draft id maps inside the target's vocabulary",
    )


# What transformers' LlamaConfig (the drafter's class) assumes when the config has no
# max_position_embeddings: the positions the drafter is built for.
LLAMA_DEFAULT_POSITIONS = 2048
NOT_SCALING = (
    "type",
    "rope_type",
    "rope_theta",
)  # the kind is compared apart; theta is not scaling


def _number(value: object) -> object:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _rope_key(config: dict[str, Any] | None) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """Rope scaling as a comparable value: its kind and every parameter, numbers as floats (40
    is 40.0); none, or the kind "default" with nothing else, is no scaling."""
    if not config:
        return None
    kind = str(config.get("rope_type") or config.get("type") or "default")
    params = sorted((str(k), repr(_number(v))) for k, v in config.items() if k not in NOT_SCALING)
    if kind == "default" and not params:
        return None
    return (kind, tuple(params))


def _rope(config: dict[str, Any] | None) -> str:
    key = _rope_key(config)
    if key is None:
        return "none"
    kind, params = key
    return kind + "".join(f", {k} {v}" for k, v in params)


def check_positions(
    drafter: DrafterModel, target: TargetModel, served_len: int | None = None
) -> list[Finding]:
    """The drafter's trained context against the served one (``--max-model-len`` when given, else
    the target's own range), and its rope scaling against the target's."""
    out: list[Finding] = []
    mine = positive_int(drafter.config, "max_position_embeddings")
    stated = "" if "max_position_embeddings" in drafter.config else " (not in its config: "
    if stated:
        mine, stated = LLAMA_DEFAULT_POSITIONS, stated + "transformers' LlamaConfig default)"
    theirs = served_len if served_len is not None else target.max_positions
    whose = "--max-model-len" if served_len is not None else "the target's"
    if mine is not None and theirs is not None and mine < theirs:
        out.append(
            Finding(
                "positions",
                WARNING,
                f"drafter max_position_embeddings {mine}{stated} is below {whose} {theirs}: past "
                f"{mine} tokens of context the drafter runs outside the positions it was trained "
                "on, and acceptance falls there",
                f"serve with --max-model-len {mine} or less, or use a drafter trained for "
                f"{theirs} positions",
            )
        )
    rope = drafter.config.get("rope_scaling")
    if not isinstance(rope, dict):  # transformers v5 writes rope_parameters
        rope = drafter.config.get("rope_parameters")
    drafter_rope = rope if isinstance(rope, dict) else None
    if _rope_key(drafter_rope) != _rope_key(target.rope_scaling):
        out.append(
            Finding(
                "positions",
                WARNING,
                f"the target's rope scaling is {_rope(target.rope_scaling)}, the drafter's "
                f"{_rope(drafter_rope)}: on long contexts the drafter's positions are not the "
                "target's",
                "use a drafter trained with the target's rope_scaling, or copy it into the "
                "drafter's config.json if it was trained with it",
            )
        )
    if not out and mine is not None and theirs is not None:
        out.append(Finding("positions", OK, f"drafter positions {mine} cover {whose} {theirs}"))
    return out
