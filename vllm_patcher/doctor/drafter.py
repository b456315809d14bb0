"""doctor's drafter checks: everything but the aux layers (the target's family, the drafter's
architecture, hidden size and fc weight, vocabulary, draft vocabulary and weight names)."""

from __future__ import annotations

import json

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import DrafterModel, TargetModel, positive_int
from ..models.roles import (
    EAGLE3_ARCHITECTURES,
    is_deepseek_v3,
    is_granite,
    is_minimax_m2,
)
from .acceptance import check_acceptance
from .flags import AUX_COUNT_READ_FROM, aux_count
from .upgrade import Upgrade


def check_drafter(
    drafter: DrafterModel,
    target: TargetModel,
    vllm_version: str,
    served_len: int | None = None,
    upgrade: Upgrade | None = None,
) -> list[Finding]:
    """Architecture, hidden size, vocabulary and weight names: everything but the aux layers.
    ``upgrade``: the run's (the release a fix names is the run's, when higher)."""
    vocab = positive_int(drafter.config, "vocab_size")
    aux = aux_count(drafter.config, vllm_version)
    return [
        _check_target(target),
        _check_architecture(drafter),
        *_check_hidden_size(drafter, target, aux, upgrade or Upgrade()),
        _check_vocab(vocab, target),
        _check_draft_vocab(drafter, vocab or target.vocab_size),
        *check_acceptance(drafter, target, served_len),
        *_check_weight_names(drafter),
    ]


def _check_target(target: TargetModel) -> Finding:
    if is_deepseek_v3(target) or is_minimax_m2(target) or is_granite(target):
        return Finding(
            "target",
            OK,
            f"{target.model_type} target: {target.num_layers} layers, hidden size "
            f"{target.hidden_size}, vocab {target.vocab_size}",
        )
    return Finding(
        "target",
        WARNING,
        f"target model_type {target.model_type!r} is of no family vllm-patcher has a patch "
        "for (vllm-patcher list): vLLM serves EAGLE-3 for it on its own or not at all; the "
        "aux-layer default assumed here is vLLM's usual one",
    )


def _check_architecture(drafter: DrafterModel) -> Finding:
    archs = drafter.config.get("architectures")
    arch_list = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if any(a in EAGLE3_ARCHITECTURES for a in arch_list):
        return Finding("architecture", OK, f"drafter architecture {', '.join(arch_list)}")
    return Finding(
        "architecture",
        PROBLEM,
        f"drafter architectures {json.dumps(archs)} name no EAGLE-3 head "
        f"({' or '.join(EAGLE3_ARCHITECTURES)})",
        f'set "architectures": ["{EAGLE3_ARCHITECTURES[0]}"] in {drafter.config_path} if this '
        "is an EAGLE-3 drafter; otherwise use an EAGLE-3 drafter",
    )


def _check_hidden_size(
    drafter: DrafterModel, target: TargetModel, aux: int, upgrade: Upgrade
) -> list[Finding]:
    """The declared target hidden size, and the fc weight that takes ``aux`` (3, or what the
    release reads from the config: ``flags.aux_count``) x it."""
    config, tensors = drafter.config, drafter.tensors
    fc_name = next((n for n in tensors if n == "fc.weight" or n.endswith(".fc.weight")), None)
    fc_in = aux * target.hidden_size
    fc_fits = fc_name is not None and tensors[fc_name].shape[1:2] == (fc_in,)
    key = "target_hidden_size" if "target_hidden_size" in config else "hidden_size"
    declared = positive_int(config, key)
    findings: list[Finding] = []
    if declared == target.hidden_size:
        findings.append(
            Finding("hidden-size", OK, f"drafter {key} {declared} = target hidden size")
        )
    else:
        fix = (
            f'set "target_hidden_size": {target.hidden_size} in {drafter.config_path} (its fc '
            f"weight already takes {aux} x {target.hidden_size})"
            if fc_fits
            else f"use a drafter trained for a target with hidden size {target.hidden_size}"
        )
        findings.append(
            Finding(
                "hidden-size",
                PROBLEM,
                f"drafter {key} is {json.dumps(config.get(key))}, the target's hidden size is "
                f"{target.hidden_size} (the fc layer takes {aux} x target hidden size)",
                fix,
            )
        )
    if fc_name is not None:
        shape = list(tensors[fc_name].shape)
        if fc_fits:
            findings.append(
                Finding("fc-weight", OK, f"{fc_name} {shape} takes {aux} x {target.hidden_size}")
            )
        else:
            findings.append(
                Finding(
                    "fc-weight",
                    PROBLEM,
                    f"{fc_name} has shape {shape}; vLLM needs {fc_in} ({aux} x "
                    f"{target.hidden_size}) inputs",
                    _fc_fix(tensors[fc_name].shape, aux, target.hidden_size, upgrade),
                )
            )
    elif drafter.weight_files:
        findings.append(
            Finding(
                "fc-weight",
                WARNING,
                "no fc.weight in the drafter's safetensors: not an EAGLE-3 head?",
            )
        )
    return findings


def _fc_fix(shape: tuple[int, ...], aux: int, hidden: int, upgrade: Upgrade) -> str:
    """A fc built for another number of aux layers of this target is a count to state, not a
    drafter to replace."""
    inputs = shape[1] if len(shape) > 1 else 0
    if inputs and inputs % hidden == 0 and inputs // hidden != aux:
        layers = inputs // hidden
        to = upgrade.to(AUX_COUNT_READ_FROM)
        return (
            f"its fc takes {layers} aux layers of this target, vLLM builds it for {aux}: serve "
            f"with vLLM {to} or newer{upgrade.note(AUX_COUNT_READ_FROM)} and "
            f'"num_aux_hidden_states": {layers} in its config'
        )
    return f"use a drafter trained for a target with hidden size {hidden}"


def _check_vocab(vocab: int | None, target: TargetModel) -> Finding:
    if vocab is None:
        return Finding(
            "vocab",
            WARNING,
            f"drafter config has no vocab_size to compare with the target's {target.vocab_size}",
        )
    if vocab != target.vocab_size:
        return Finding(
            "vocab",
            PROBLEM,
            f"drafter vocab_size {vocab} != target vocab_size {target.vocab_size}: "
            "different tokenizers",
            f"use a drafter trained with this target's tokenizer (vocab_size {target.vocab_size})",
        )
    return Finding("vocab", OK, f"vocab_size {vocab} matches the target")


def _check_draft_vocab(drafter: DrafterModel, vocab: int) -> Finding:
    draft = positive_int(drafter.config, "draft_vocab_size")
    if draft is None or draft >= vocab:
        return Finding("draft-vocab", OK, "the drafter predicts over the full vocabulary")
    if not drafter.weight_files:
        return Finding(
            "draft-vocab",
            WARNING,
            f"draft_vocab_size {draft} < vocab_size {vocab}: cannot check d2t/t2d, no safetensors",
        )
    d2t = drafter.tensors.get("d2t")
    if d2t is None:
        return Finding(
            "draft-vocab",
            PROBLEM,
            f"draft_vocab_size {draft} < vocab_size {vocab} but the weights have no d2t tensor: "
            "draft tokens cannot be mapped to target tokens",
            "re-export the drafter with its d2t (draft-to-target) mapping, or use one that has it",
        )
    if d2t.shape != (draft,):
        return Finding(
            "draft-vocab",
            PROBLEM,
            f"d2t has shape {list(d2t.shape)}, not [{draft}] (draft_vocab_size)",
            "re-export the drafter: its d2t does not match its draft_vocab_size",
        )
    if "t2d" not in drafter.tensors:
        # vLLM's loader skips t2d; SGLang uses it.
        return Finding(
            "draft-vocab",
            WARNING,
            f"draft_vocab_size {draft}: d2t present, t2d missing (vLLM does not read t2d; SGLang does)",
        )
    return Finding("draft-vocab", OK, f"draft_vocab_size {draft} with d2t and t2d")


def _check_weight_names(drafter: DrafterModel) -> list[Finding]:
    if not drafter.weight_files:
        return [
            Finding(
                "weight-names",
                WARNING,
                f"no *.safetensors in {drafter.path}: fc, d2t/t2d and tensor names not checked",
            )
        ]
    styles = [
        p for p in ("layers.0.", "midlayer.") if any(n.startswith(p) for n in drafter.tensors)
    ]
    if not styles:
        return [
            Finding(
                "weight-names",
                WARNING,
                "no layers.0.* or midlayer.* tensors: vLLM's EAGLE-3 loader will find no decoder layer",
            )
        ]
    note = " (vLLM maps midlayer.* to layers.0.*)" if "midlayer." in styles else ""
    return [
        Finding(
            "weight-names",
            OK,
            f"decoder layer weights named {' and '.join(s + '*' for s in styles)}{note}",
        )
    ]
