"""doctor's aux-layer check: the layers a vLLM release will capture for this drafter, judged
against those the drafter was trained on (the rules themselves are in ``rules``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import AUX_KEY, NESTED_KEY, DrafterModel, TargetModel
from .rules import (
    GUESSED,
    READS_TOP_LEVEL_FROM,
    AuxLayerPlan,
    aux_layer_plan,
    in_range,
    nested_value,
    reads_top_level_key,
    show_ids,
)
from .upgrade import Upgrade


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


def _finding(level: str, message: str, fix: str | None = None) -> Finding:
    return Finding("aux-layers", level, message, fix)


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
    drafter: DrafterModel, target: TargetModel, vllm_version: str, upgrade: Upgrade | None = None
) -> tuple[AuxLayerPlan, list[Finding]]:
    """The aux layers this release will capture, judged against those the drafter was trained on.
    ``upgrade``: the run's (the release a fix names is the run's, when higher)."""
    plan = aux_layer_plan(drafter.config, target.num_layers, vllm_version)
    findings = _declared_keys(drafter, plan)
    out_of_range = _out_of_range(plan, target.num_layers, drafter.config_path, vllm_version)
    if out_of_range is not None:
        return plan, [*findings, out_of_range]
    verdict = _verdict(plan, drafter.config_path, vllm_version, upgrade or Upgrade())
    return plan, [*findings, verdict]


def _declared_keys(drafter: DrafterModel, plan: AuxLayerPlan) -> list[Finding]:
    """Warnings about what the config declares: a key vLLM ignores, or two that disagree."""
    cfg, top, nested = drafter.config_path, plan.top_level, plan.nested
    findings: list[Finding] = []
    raw_top, raw_nested = drafter.config.get(AUX_KEY), nested_value(drafter.config)
    if raw_top is not None and top is None:
        findings.append(
            _finding(
                WARNING,
                f"top-level {AUX_KEY} is {json.dumps(raw_top)}, not a non-empty list of layer "
                "numbers; vLLM ignores it",
                _key_fix(cfg, plan) if plan.write_ids is not None else None,
            )
        )
    if raw_nested is not None and nested is None:
        findings.append(
            _finding(
                WARNING, f"{NESTED_KEY} is {json.dumps(raw_nested)}, not a list of layer numbers"
            )
        )
    if top is not None and nested is not None:
        shifted = tuple(i + 1 for i in nested)
        if shifted != top:
            findings.append(
                _finding(
                    WARNING,
                    f"the top-level {AUX_KEY} {show_ids(top)} = {_outputs(top)} disagrees with "
                    f"{NESTED_KEY} {show_ids(nested)} (SpecForge layer outputs), which means "
                    f"vLLM {show_ids(shifted)}",
                    f"if the drafter was trained with SpecForge/SGLang, set the top-level "
                    f"{AUX_KEY} in {cfg} to {show_ids(shifted)}",
                )
            )
    return findings


def _out_of_range(plan: AuxLayerPlan, n: int, cfg: Path, vllm_version: str) -> Finding | None:
    """A problem when vLLM would capture, or the drafter was trained on, a layer the target lacks."""
    used, trained = plan.vllm_ids, plan.trained_ids
    if not in_range(used, n):
        return _finding(
            PROBLEM,
            f"vLLM {vllm_version} would capture layers {show_ids(used)} ({plan.source}), outside the target's [0, {n})",
            _key_fix(cfg, plan)
            if plan.write_ids is not None
            else f"set {AUX_KEY} to layers inside [0, {n}) (vLLM's default is {show_ids(plan.default)})",
        )
    if trained is not None and not in_range(trained, n):
        return _finding(
            PROBLEM,
            f"the drafter was trained on layers {show_ids(trained)} in vLLM's convention, "
            f"outside the target's [0, {n}): it does not fit this target",
            "use a drafter trained for this target",
        )
    return None


def _verdict(plan: AuxLayerPlan, cfg: Path, vllm_version: str, upgrade: Upgrade) -> Finding:
    """What this release captures, against what the drafter was trained on."""
    used, top, nested, trained = plan.vllm_ids, plan.top_level, plan.nested, plan.trained_ids
    release = f"vLLM {vllm_version}"
    if trained is None:
        return _finding(
            OK,
            f"no aux layers declared; {release} uses its default {show_ids(used)} = {_outputs(used)}",
        )
    if plan.source == "top-level":
        return _finding(
            OK, f"{release} uses the top-level {AUX_KEY} {show_ids(top)} = {_outputs(top or ())}"
        )
    if top is not None:
        declared = f"the top-level {AUX_KEY} {show_ids(top)}"
    else:
        declared = (
            f"{NESTED_KEY} {show_ids(nested)} (SpecForge layer outputs = vLLM {show_ids(trained)})"
        )
    reads_top = reads_top_level_key(vllm_version)
    if trained == used:
        how = "reads no aux-layer key" if not reads_top else f"ignores {declared}"
        hint: str | None = None
        if plan.write_ids is not None:
            hint = _key_fix(cfg, plan)
        elif top is None:
            hint = (
                f"{_key_fix(cfg, trained, by_fix=False)}, so that releases which read it "
                f"({READS_TOP_LEVEL_FROM} and newer) keep these layers"
            )
        return _finding(
            WARNING,
            f"{release} {how}; its default {show_ids(used)} = {_outputs(used)} happens to be the "
            "layers the drafter was trained on",
            hint,
        )
    if plan.source == "nested":
        how = f"reads {declared} unshifted: it captures"
    elif reads_top:
        how = f"ignores {declared} and uses its default"
    else:
        how = f"reads no aux-layer key: it ignores {declared} and uses its default"
    return _finding(
        PROBLEM,
        f"{release} {how} {show_ids(used)} = {_outputs(used)}, {_shift(used, trained)}",
        _mismatch_fix(plan, cfg, reads_top, trained, upgrade),
    )


def _mismatch_fix(
    plan: AuxLayerPlan, cfg: Path, reads_top: bool, trained: tuple[int, ...], upgrade: Upgrade
) -> str:
    if reads_top:
        return _key_fix(cfg, plan if plan.write_ids is not None else trained)
    to = upgrade.to(READS_TOP_LEVEL_FROM)
    fix = (
        f"upgrade to vLLM {to} or newer{upgrade.note(READS_TOP_LEVEL_FROM)}, which reads the "
        f"top-level {AUX_KEY}"
    )
    if plan.top_level is not None:
        return fix
    return f"{fix}, and {_key_fix(cfg, trained, by_fix=False)}"
