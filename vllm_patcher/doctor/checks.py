"""doctor's checks: the drafter against the target for one vLLM release (aux layers, shapes,
vocabulary, weight names, the patches the release needs, the roles of the two arguments)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import (
    AUX_KEY,
    NESTED_KEY,
    DrafterModel,
    TargetModel,
    positive_int,
    read_config,
    read_drafter,
    target_from_config,
)
from ..models.families import (
    DEEPSEEK_V3_FAMILY,
    EAGLE3_ARCHITECTURES,
    GRANITE,
    MINIMAX_M2,
    described,
    is_deepseek_v3,
    is_granite,
    is_minimax_m2,
    looks_like_drafter,
    looks_like_target,
)
from ..models.hub import ModelSource, locate_model
from .report import DoctorReport
from .rules import (
    GUESSED,
    KIMI_K25_FROM,
    MINIMAX_M2_FROM,
    READS_TOP_LEVEL_FROM,
    AuxLayerPlan,
    aux_layer_plan,
    in_range,
    nested_value,
    reads_top_level_key,
    release_version,
    show_ids,
)

# The built-in patches a target family needs; their patch.toml says which releases apply can
# patch (``releases``) and from which one upstream has the change (``fixed_in``).
DEEPSEEK_PATCHES = ("eagle3-whitelist", "supports-eagle3")


KIMI_K25_PATCHES = ("kimi-k25-image-token",)


MINIMAX_M2_PATCHES = ("eagle3-minimax-m2",)
GRANITE_PATCHES = ("eagle3-granite",)


def _outputs(ids: tuple[int, ...]) -> str:
    return "outputs of layers " + ", ".join(str(i - 1) for i in ids)


def _shift(used: tuple[int, ...], trained: tuple[int, ...]) -> str:
    diffs = {u - t for u, t in zip(used, trained, strict=False)}
    if len(used) != len(trained) or len(diffs) != 1:
        return "different layers from those the drafter was trained on"
    (d,) = diffs
    layers = "one layer" if abs(d) == 1 else f"{abs(d)} layers"
    return f"{layers} {'earlier' if d < 0 else 'later'} than the drafter was trained on"


def _key_fix(
    config_path: Path, plan_or_ids: AuxLayerPlan | tuple[int, ...], by_fix: bool = True
) -> str:
    if isinstance(plan_or_ids, AuxLayerPlan):
        ids = plan_or_ids.write_ids or ()
        guess = (
            f"; a GUESS, based on {plan_or_ids.write_based_on}"
            if plan_or_ids.write_basis == GUESSED
            else ""
        )
    else:
        ids, guess = plan_or_ids, ""
    fix = f'add "{AUX_KEY}": {show_ids(ids)} at the top level of {config_path}{guess}'
    return f"{fix} (vllm-patcher doctor --fix writes it)" if by_fix else fix


# One severity per effect, whatever the release (the release decides only which effect occurs):
# - vLLM would capture a layer the target does not have: problem (the load or the forward fails).
# - vLLM captures other layers than those the drafter was trained on (through its default, or a
#   key read unshifted): problem. It does not crash, it silently costs acceptance rate, and that
#   is exactly what a 25-minute load would not reveal; doctor exists to stop it before the load.
# - vLLM ignores the drafter's declared layers but its default happens to be them: warning. What
#   runs is right; the config only says it in a way this release does not read.
# - the config declares two layer sets that disagree (top-level vs SpecForge's nested one), or a
#   key that is not a list of layer numbers (vLLM ignores it): warning. What vLLM really captures
#   is judged on its own by the rules above.
def check_aux_layers(
    drafter: DrafterModel, target: TargetModel, vllm_version: str
) -> tuple[AuxLayerPlan, list[Finding]]:
    """The aux layers this release will capture, judged against those the drafter was trained on."""
    plan = aux_layer_plan(drafter.config, target.num_layers, vllm_version)
    n, used, cfg = target.num_layers, plan.vllm_ids, drafter.config_path
    top, nested, trained = plan.top_level, plan.nested, plan.trained_ids
    release = f"vLLM {vllm_version}"
    reads_top = reads_top_level_key(vllm_version)
    findings: list[Finding] = []

    def add(level: str, message: str, fix: str | None = None) -> None:
        findings.append(Finding("aux-layers", level, message, fix))

    raw_top, raw_nested = drafter.config.get(AUX_KEY), nested_value(drafter.config)
    if raw_top is not None and top is None:
        add(
            WARNING,
            f"top-level {AUX_KEY} is {json.dumps(raw_top)}, not a non-empty list of layer "
            "numbers; vLLM ignores it",
            _key_fix(cfg, plan) if plan.write_ids is not None else None,
        )
    if raw_nested is not None and nested is None:
        add(WARNING, f"{NESTED_KEY} is {json.dumps(raw_nested)}, not a list of layer numbers")
    if top is not None and nested is not None:
        shifted = tuple(i + 1 for i in nested)
        if shifted != top:
            add(
                WARNING,
                f"the top-level {AUX_KEY} {show_ids(top)} = {_outputs(top)} disagrees with "
                f"{NESTED_KEY} {show_ids(nested)} (SpecForge layer outputs), which means vLLM "
                f"{show_ids(shifted)}",
                f"if the drafter was trained with SpecForge/SGLang, set the top-level "
                f"{AUX_KEY} in {cfg} to {show_ids(shifted)}",
            )

    if not in_range(used, n):
        add(
            PROBLEM,
            f"{release} would capture layers {show_ids(used)} ({plan.source}), outside the target's [0, {n})",
            _key_fix(cfg, plan)
            if plan.write_ids is not None
            else f"set {AUX_KEY} to layers inside [0, {n}) (vLLM's default is {show_ids(plan.default)})",
        )
        return plan, findings
    if trained is not None and not in_range(trained, n):
        add(
            PROBLEM,
            f"the drafter was trained on layers {show_ids(trained)} in vLLM's convention, "
            f"outside the target's [0, {n}): it does not fit this target",
            "use a drafter trained for this target",
        )
        return plan, findings

    if top is not None:
        declared = f"the top-level {AUX_KEY} {show_ids(top)}"
    elif nested is not None:
        declared = (
            f"{NESTED_KEY} {show_ids(nested)} (SpecForge layer outputs = vLLM {show_ids(trained)})"
        )
    if trained is None:
        add(
            OK,
            f"no aux layers declared; {release} uses its default {show_ids(used)} = {_outputs(used)}",
        )
    elif plan.source == "top-level":
        add(OK, f"{release} uses the top-level {AUX_KEY} {show_ids(top)} = {_outputs(top or ())}")
    elif trained == used:
        how = "reads no aux-layer key" if not reads_top else f"ignores {declared}"
        hint: str | None = None
        if plan.write_ids is not None:
            hint = _key_fix(cfg, plan)
        elif top is None:
            hint = (
                f"{_key_fix(cfg, trained, by_fix=False)}, so that releases which read it "
                f"({READS_TOP_LEVEL_FROM} and newer) keep these layers"
            )
        add(
            WARNING,
            f"{release} {how}; its default {show_ids(used)} = {_outputs(used)} happens to be the "
            "layers the drafter was trained on",
            hint,
        )
    else:
        if plan.source == "nested":
            how = f"reads {declared} unshifted: it captures"
        elif reads_top:
            how = f"ignores {declared} and uses its default"
        else:
            how = f"reads no aux-layer key: it ignores {declared} and uses its default"
        if reads_top:
            fix = _key_fix(cfg, plan if plan.write_ids is not None else trained)
        else:
            upgrade = (
                f"upgrade to vLLM {READS_TOP_LEVEL_FROM} or newer, which reads the top-level "
                f"{AUX_KEY}"
            )
            fix = (
                upgrade
                if top is not None
                else f"{upgrade}, and {_key_fix(cfg, trained, by_fix=False)}"
            )
        add(
            PROBLEM,
            f"{release} {how} {show_ids(used)} = {_outputs(used)}, {_shift(used, trained)}",
            fix,
        )
    return plan, findings


def check_drafter(drafter: DrafterModel, target: TargetModel) -> list[Finding]:
    """Architecture, hidden size, vocabulary and weight names: everything but the aux layers."""
    config, tensors, cfg = drafter.config, drafter.tensors, drafter.config_path
    has_weights = bool(drafter.weight_files)
    findings: list[Finding] = []

    if is_deepseek_v3(target) or is_minimax_m2(target) or is_granite(target):
        findings.append(
            Finding(
                "target",
                OK,
                f"{target.model_type} target: {target.num_layers} layers, hidden size "
                f"{target.hidden_size}, vocab {target.vocab_size}",
            )
        )
    else:
        findings.append(
            Finding(
                "target",
                WARNING,
                f"target model_type {target.model_type!r} is neither a DeepSeek-V3-family type "
                f"({', '.join(DEEPSEEK_V3_FAMILY)}) nor {MINIMAX_M2} nor {GRANITE}; the aux-layer "
                "default assumed here is theirs",
            )
        )

    archs = config.get("architectures")
    arch_list = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if any(a in EAGLE3_ARCHITECTURES for a in arch_list):
        findings.append(Finding("architecture", OK, f"drafter architecture {', '.join(arch_list)}"))
    else:
        findings.append(
            Finding(
                "architecture",
                PROBLEM,
                f"drafter architectures {json.dumps(archs)} name no EAGLE-3 head "
                f"({' or '.join(EAGLE3_ARCHITECTURES)})",
                f'set "architectures": ["{EAGLE3_ARCHITECTURES[0]}"] in {cfg} if this is an '
                "EAGLE-3 drafter; otherwise use an EAGLE-3 drafter",
            )
        )

    fc_name = next((n for n in tensors if n == "fc.weight" or n.endswith(".fc.weight")), None)
    fc_in = 3 * target.hidden_size
    fc_fits = fc_name is not None and tensors[fc_name].shape[1:2] == (fc_in,)
    key = "target_hidden_size" if "target_hidden_size" in config else "hidden_size"
    declared = positive_int(config, key)
    if declared == target.hidden_size:
        findings.append(
            Finding("hidden-size", OK, f"drafter {key} {declared} = target hidden size")
        )
    else:
        fix = (
            f'set "target_hidden_size": {target.hidden_size} in {cfg} (its fc weight already '
            f"takes 3 x {target.hidden_size})"
            if fc_fits
            else f"use a drafter trained for a target with hidden size {target.hidden_size}"
        )
        findings.append(
            Finding(
                "hidden-size",
                PROBLEM,
                f"drafter {key} is {json.dumps(config.get(key))}, the target's hidden size is "
                f"{target.hidden_size} (the fc layer takes 3 x target hidden size)",
                fix,
            )
        )
    if fc_name is not None:
        shape = list(tensors[fc_name].shape)
        if fc_fits:
            findings.append(
                Finding("fc-weight", OK, f"{fc_name} {shape} takes 3 x {target.hidden_size}")
            )
        else:
            findings.append(
                Finding(
                    "fc-weight",
                    PROBLEM,
                    f"{fc_name} has shape {shape}; vLLM needs {fc_in} (3 x {target.hidden_size}) inputs",
                    f"use a drafter trained for a target with hidden size {target.hidden_size}",
                )
            )
    elif has_weights:
        findings.append(
            Finding(
                "fc-weight",
                WARNING,
                "no fc.weight in the drafter's safetensors: not an EAGLE-3 head?",
            )
        )

    vocab = positive_int(config, "vocab_size")
    if vocab is None:
        findings.append(
            Finding(
                "vocab",
                WARNING,
                f"drafter config has no vocab_size to compare with the target's {target.vocab_size}",
            )
        )
    elif vocab != target.vocab_size:
        findings.append(
            Finding(
                "vocab",
                PROBLEM,
                f"drafter vocab_size {vocab} != target vocab_size {target.vocab_size}: "
                "different tokenizers",
                f"use a drafter trained with this target's tokenizer (vocab_size {target.vocab_size})",
            )
        )
    else:
        findings.append(Finding("vocab", OK, f"vocab_size {vocab} matches the target"))

    findings.append(_check_draft_vocab(drafter, vocab or target.vocab_size))
    findings.extend(_check_weight_names(drafter))
    return findings


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


def _family(target: TargetModel) -> tuple[str, tuple[str, ...]]:
    """The family's name and the built-in patches its EAGLE-3 needs."""
    if is_minimax_m2(target):
        return "MiniMax-M2", MINIMAX_M2_PATCHES
    if is_granite(target):
        return "Granite", GRANITE_PATCHES
    kimi = KIMI_K25_PATCHES if target.model_type == "kimi_k25" else ()
    return "DeepSeek-V3-family", DEEPSEEK_PATCHES + kimi


def check_release(vllm_version: str, target: TargetModel) -> list[Finding]:
    """A problem when apply can neither patch this release for this target nor finds it upstream.

    Read from the built-in patch folders (``releases`` and ``fixed_in`` in each patch.toml), the
    same facts apply goes by: at or after ``fixed_in`` the change is upstream, which is fine.
    """
    from ..catalogue.folders import load_catalogue

    family, patches = _family(target)
    catalogue = load_catalogue()
    needed = [p for p in catalogue.patches if p.name in patches]
    missing = [p for p in needed if not p.is_upstream(vllm_version) and not p.covers(vllm_version)]
    if not missing:
        return []
    release = release_version(vllm_version)
    firsts = [
        Version(spec.version)
        for p in needed
        for spec in p.releases
        if spec.operator in (">=", "==", "~=")
    ]
    first = max(firsts) if firsts else None
    upstream = max((p.fixed_in for p in needed if p.fixed_in is not None), default=None)
    span = (
        f"{first} up to (not including) {upstream}"
        if first is not None and upstream is not None
        else "the releases in their patch.toml"
    )
    names = ", ".join(f"{p.name} {p.releases}" for p in missing)
    where = f"older than {first}" if first is not None and release < first else "outside that range"
    return [
        Finding(
            "vllm-release",
            PROBLEM,
            f"vLLM {vllm_version} is {where}: it refuses an EAGLE-3 drafter on a {family} "
            f"target, and vllm-patcher cannot patch it: for that target it patches {span} "
            f"({names} in its patch folders)",
            f"upgrade vLLM to {first} or newer ({upstream} and newer need no patch), e.g. "
            "make pre-deploy VLLM_VERSION=0.15.1, then run doctor again"
            if first is not None
            else "use a release the patches cover (vllm-patcher list shows them)",
        )
    ]


def check_roles(
    model: ModelSource,
    model_config: dict[str, Any],
    drafter: ModelSource,
    drafter_config: dict[str, Any],
) -> list[Finding]:
    """A problem when --model is a drafter or --drafter a target: every other check would then
    judge the wrong file (a swapped pair used to show aux layers [2, 0, -2])."""
    model_is_drafter = looks_like_drafter(model_config)
    drafter_is_target = looks_like_target(drafter_config)
    m = f"--model {model.given} ({described(model_config)})"
    d = f"--drafter {drafter.given} ({described(drafter_config)})"
    if model_is_drafter and (drafter_is_target or not looks_like_drafter(drafter_config)):
        return [
            Finding(
                "roles",
                PROBLEM,
                f"--model and --drafter look swapped: {m} looks like an EAGLE-3 drafter, "
                f"{d} like a target model",
                f"swap them: --model {drafter.given} --drafter {model.given}",
            )
        ]
    if model_is_drafter:
        return [
            Finding(
                "roles",
                PROBLEM,
                f"{m} looks like an EAGLE-3 drafter, not a target model (and so does {d})",
                "pass the target checkpoint (DeepSeek-V3, Kimi-K2/K2.5, MiniMax-M2) as --model",
            )
        ]
    if drafter_is_target:
        return [
            Finding(
                "roles",
                PROBLEM,
                f"{d} looks like a target model, not an EAGLE-3 drafter (and so does {m})",
                "pass the EAGLE-3 drafter (a LlamaForCausalLMEagle3 head) as --drafter",
            )
        ]
    return []


def check(
    model_dir: str | Path,
    drafter_dir: str | Path,
    vllm_version: str,
    python: Callable[[], str] | None = None,
) -> DoctorReport:
    """Every check, reading only; nothing is written.

    ``model_dir`` and ``drafter_dir`` may be Hugging Face repo ids, looked up in the local cache
    through ``python()``'s huggingface_hub (this interpreter's when None).
    """
    release = release_version(vllm_version)
    model_source = locate_model(model_dir, "model", python)
    drafter_source = locate_model(drafter_dir, "drafter", python)
    model_config = read_config(Path(model_source.path), "model")
    drafter_config = read_config(Path(drafter_source.path), "drafter")
    roles = check_roles(model_source, model_config, drafter_source, drafter_config)
    if roles:
        return DoctorReport(
            vllm_version, None, None, None, roles, None, model_source, drafter_source
        )
    target = target_from_config(Path(model_source.path), model_config)
    drafter = read_drafter(drafter_source.path, drafter_config)
    plan, aux_findings = check_aux_layers(drafter, target, vllm_version)
    findings = check_drafter(drafter, target) + aux_findings
    # The release cannot load the target at all: a problem on every release that lacks its model.
    if target.model_type == "kimi_k25" and release < KIMI_K25_FROM:
        findings.insert(
            0,
            Finding(
                "target",
                PROBLEM,
                f"vLLM {vllm_version} cannot load a Kimi-K2.5 target: its model (kimi_k25.py) "
                "arrived in vLLM 0.15.0",
                "serve it with vLLM 0.15.0 or newer (make pre-deploy VLLM_VERSION=0.15.1)",
            ),
        )
    if is_minimax_m2(target) and release < MINIMAX_M2_FROM:
        findings.insert(
            0,
            Finding(
                "target",
                PROBLEM,
                f"vLLM {vllm_version} cannot load a MiniMax-M2 target: its model (minimax_m2.py) "
                f"arrived in vLLM {MINIMAX_M2_FROM}",
                f"serve it with vLLM {MINIMAX_M2_FROM} or newer",
            ),
        )
    findings[:0] = check_release(vllm_version, target)
    return DoctorReport(
        vllm_version, target, drafter, plan, findings, None, model_source, drafter_source
    )
