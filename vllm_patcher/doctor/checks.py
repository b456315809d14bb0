"""doctor's checks: the drafter against the target for one vLLM release. ``check`` runs them
all: the roles of the two arguments, the release (can it load the target, can apply patch it),
then the aux layers (``aux_layers``) and the rest of the drafter (``drafter``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.version import Version

from ..catalogue.model import Catalogue, Patch
from ..catalogue.shipped import first_release_with
from ..catalogue.targets import DEEPSEEK_PATCHES, family_of
from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import (
    DrafterModel,
    TargetModel,
    read_config,
    read_drafter,
    target_from_config,
)
from ..models.hub import ModelSource, locate_model
from ..models.roles import (
    described,
    is_minimax_m2,
    looks_like_drafter,
    looks_like_target,
)
from ..releases import PP_CARRY_FAMILIES, PP_CARRY_FROM
from .aux_layers import check_aux_layers
from .doctor_report import DoctorReport
from .drafter import check_drafter
from .empty_capture import check_capture
from .faults import findings as fault_findings
from .flags import check_flags
from .kv_page import check_kv_page
from .rules import AuxLayerPlan, release_version
from .upgrade import Upgrade

if TYPE_CHECKING:
    from ..serving.args import ServeArgs

# The model file a family needs in vLLM; the first release that has it is the first release a
# built-in pin touches it in (``catalogue.shipped``).
KIMI_K25_MODEL = "vllm/model_executor/models/kimi_k25.py"


MINIMAX_M2_MODEL = "vllm/model_executor/models/minimax_m2.py"


# The command a hint suggests for setting up a release to serve (the Makefile's example release).
PRE_DEPLOY = "make pre-deploy VLLM_VERSION=0.15.1"


def _family(target: TargetModel, catalogue: Catalogue) -> tuple[str, tuple[str, ...]]:
    """The family's name and the built-in patches its EAGLE-3 needs (``catalogue.targets``, the
    one owner); a target of no known family (doctor has said so) is judged as DeepSeek's."""
    found = family_of((target.model_type, target.text_model_type), catalogue)
    if found is None:
        return "DeepSeek-V3-family", DEEPSEEK_PATCHES
    return found.name, found.patches


def check_release(
    vllm_version: str, target: TargetModel, catalogue: Catalogue, upgrade: Upgrade | None = None
) -> list[Finding]:
    """A problem when apply can neither patch this release for this target nor finds it upstream.

    Read from the built-in patch folders (``releases`` and ``fixed_in`` in each patch.toml), the
    same facts apply goes by: at or after ``fixed_in`` the change is upstream, which is fine.
    ``upgrade``: the run's (the release its fix names is the run's, when higher).
    """
    upgrade = upgrade or Upgrade()
    family, patches = _family(target, catalogue)
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
    never = any(p.fixed_in is None for p in needed)  # no upstream EAGLE-3 in any release
    upstream = None if never else max(p.fixed_in for p in needed if p.fixed_in is not None)
    if first is not None and upstream is not None:
        span = f"{first} up to (not including) {upstream}"
    elif first is not None and never:
        span = f"{first} and later (no upstream EAGLE-3 for it in any release)"
    else:
        span = "the releases in their patch.toml"
    names = ", ".join(f"{p.name} {p.releases}" for p in missing)
    where = f"older than {first}" if first is not None and release < first else "outside that range"
    fix = "use a release the patches cover (vllm-patcher list shows them)"
    if first is not None:
        to = upgrade.to(first)
        no_patch = f"{upstream} and newer need no patch" if upstream is not None else ""
        said = "; ".join(part for part in (upgrade.why(first), no_patch) if part)
        said = f" ({said})" if said else ""
        fix = f"upgrade vLLM to {to} or newer{said}{_example(needed, to)}, then run doctor again"
    return [
        Finding(
            "vllm-release",
            PROBLEM,
            f"vLLM {vllm_version} is {where}: it cannot serve EAGLE-3 for a {family} "
            f"target, and vllm-patcher cannot patch it: for that target it patches {span} "
            f"({names} in its patch folders)",
            fix,
        )
    ]


def _example(needed: list[Patch], to: Version) -> str:
    """``PRE_DEPLOY`` as an example, where its release is patched for the target and is ``to``
    or newer."""
    example_release = Version(PRE_DEPLOY.rsplit("=", 1)[1])
    patched_there = all(p.covers(str(example_release)) for p in needed)
    return f", e.g. {PRE_DEPLOY}" if patched_there and example_release >= to else ""


def check_model_file(
    vllm_version: str, target: TargetModel, catalogue: Catalogue, upgrade: Upgrade | None = None
) -> Finding | None:
    """A problem on every release that lacks the target's model file: it cannot load the target
    at all, patched or not."""
    upgrade = upgrade or Upgrade()
    if target.model_type == "kimi_k25":
        name, path, example = "Kimi-K2.5", KIMI_K25_MODEL, PRE_DEPLOY
    elif is_minimax_m2(target):
        name, path, example = "MiniMax-M2", MINIMAX_M2_MODEL, None
    else:
        return None
    first = first_release_with(catalogue, path)
    if first is None or release_version(vllm_version) >= first:
        return None
    to = upgrade.to(first)
    if example is not None and Version(example.rsplit("=", 1)[1]) >= to:
        example_text = f" ({example})"
    else:
        example_text = ""
    return Finding(
        "target",
        PROBLEM,
        f"vLLM {vllm_version} cannot load a {name} target: its model ({path.rsplit('/', 1)[-1]}) "
        f"arrived in vLLM {first}",
        f"serve it with vLLM {to} or newer{upgrade.note(first)}{example_text}",
    )


def _family_target(
    findings: list[Finding], target: TargetModel, catalogue: Catalogue
) -> list[Finding]:
    """A target of a family backport (its patch.toml's ``[family]``) is a known target: its
    default aux layers are vLLM's ``(2, n // 2, n - 3)`` like the others'."""
    types = {target.model_type, target.text_model_type}
    family = next(
        (p for p in catalogue.patches if p.family and types & set(p.family.model_types)), None
    )
    if family is None or family.family is None:
        return findings
    said = (
        f"{family.family.name} target ({target.model_type}, {family.name}): "
        f"{target.num_layers} layers, hidden size {target.hidden_size}, vocab {target.vocab_size}"
    )
    return [
        Finding("target", OK, said) if f.check == "target" and f.level == WARNING else f
        for f in findings
    ]


def check_pipeline(pipeline: int | None, target: TargetModel, vllm_version: str) -> list[Finding]:
    """A problem for pipeline parallelism above 1 where the release cannot carry the aux hidden
    states captured on an earlier stage to the drafter (before 0.30.0, and from it for the
    families that do not opt in): every family backport is one of those."""
    return pipeline_findings(pipeline, (target.model_type, target.text_model_type), vllm_version)


def pipeline_findings(
    pipeline: int | None, model_types: tuple[str, ...], vllm_version: str
) -> list[Finding]:
    """``check_pipeline`` for a target known by its model types (the first: as users name it;
    none: a target whose config.json was not read, judged only where the release decides)."""
    if pipeline is None or pipeline <= 1:
        return []
    release = release_version(vllm_version)
    types = {t for t in model_types if t}
    if release >= PP_CARRY_FROM and (types & set(PP_CARRY_FAMILIES) or not types):
        return []
    where = (
        f"vLLM {vllm_version} (before {PP_CARRY_FROM})"
        if release < PP_CARRY_FROM
        else f"vLLM {vllm_version} for a {model_types[0]} target (from {PP_CARRY_FROM} only "
        f"{', '.join(PP_CARRY_FAMILIES)} carry them)"
    )
    return [
        Finding(
            "pipeline",
            PROBLEM,
            f"--pipeline-parallel-size {pipeline}: {where} does not pass the aux hidden states "
            "captured on an earlier pipeline stage to the EAGLE-3 drafter, so it gets only the "
            "last stage's layers",
            "serve with --pipeline-parallel-size 1 (use --tensor-parallel-size to spread the model)",
        )
    ]


def check_roles(
    model: ModelSource,
    model_config: dict[str, Any],
    drafter: ModelSource,
    drafter_config: dict[str, Any],
    catalogue: Catalogue | None = None,
) -> list[Finding]:
    """A problem when --model is a drafter or --drafter a target: every other check would then
    judge the wrong file (a swapped pair used to show aux layers [2, 0, -2]). A target is a model
    of a family ``catalogue.targets`` knows (the catalogue's ``[family]`` tables included)."""
    model_is_drafter = looks_like_drafter(model_config)
    drafter_is_target = looks_like_target(drafter_config, catalogue)
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
    catalogue: Catalogue,
    python: Callable[[], str] | None = None,
    served_len: int | None = None,
    pipeline: int | None = None,
    tensor: int | None = None,
) -> DoctorReport:
    """Every check, reading only; nothing is written. ``served_len``: the server's
    ``--max-model-len``, when given; ``pipeline``: its ``--pipeline-parallel-size``; ``tensor``:
    its ``--tensor-parallel-size``.

    ``model_dir`` and ``drafter_dir`` may be Hugging Face repo ids, looked up in the local cache
    through ``python()``'s huggingface_hub (this interpreter's when None). ``catalogue`` is the
    command's: the releases its patches cover and pin.
    """
    release_version(vllm_version)  # a usage error before anything is read
    model_source = locate_model(model_dir, "model", python)
    drafter_source = locate_model(drafter_dir, "drafter", python)
    model_config = read_config(Path(model_source.path), "model")
    drafter_config = read_config(Path(drafter_source.path), "drafter")
    roles = check_roles(model_source, model_config, drafter_source, drafter_config, catalogue)
    if roles:
        return DoctorReport(
            vllm_version, None, None, None, roles, None, model_source, drafter_source
        )
    target = target_from_config(Path(model_source.path), model_config)
    drafter = read_drafter(drafter_source.path, drafter_config)
    run = _Run(target, drafter, model_config, vllm_version, catalogue, served_len, pipeline, tensor)
    upgrade = Upgrade()
    plan, findings = run.judge(upgrade)
    if upgrade.highest is not None:  # fixes named different releases: each names the highest
        plan, findings = run.judge(Upgrade(upgrade.highest))
    return DoctorReport(
        vllm_version, target, drafter, plan, findings, None, model_source, drafter_source
    )


class _Run(NamedTuple):
    """What one doctor run judges, once its files are read."""

    target: TargetModel
    drafter: DrafterModel
    model_config: dict[str, Any]
    vllm_version: str
    catalogue: Catalogue
    served_len: int | None
    pipeline: int | None
    tensor: int | None

    def judge(self, upgrade: Upgrade) -> tuple[AuxLayerPlan, list[Finding]]:
        """Every finding after the roles, in report order; the releases their fixes need are
        noted in ``upgrade``, and each fix names ``upgrade.floor`` where that is higher."""
        target, drafter, catalogue = self.target, self.drafter, self.catalogue
        version = self.vllm_version
        plan, aux_findings = check_aux_layers(drafter, target, version, upgrade)
        findings = _family_target(
            check_drafter(drafter, target, version, self.served_len, upgrade), target, catalogue
        )
        findings += aux_findings
        findings += check_flags(drafter.config, version, upgrade)
        findings += fault_findings(target.model_type, version)
        findings += check_capture(target, version)
        findings += check_pipeline(self.pipeline, target, version)
        findings += check_kv_page(drafter.config, target, self.model_config, version, self.tensor)
        missing_model = check_model_file(version, target, catalogue, upgrade)
        if missing_model is not None:  # one target, one finding: the problem replaces the rest
            findings = [missing_model, *(f for f in findings if f.check != "target")]
        findings[:0] = check_release(version, target, catalogue, upgrade)
        return plan, findings


def serve_pipeline_refusal(args: ServeArgs, vllm_version: str) -> str | None:
    """Why ``rehearse`` and ``payoff sweep`` refuse to start these ``vllm serve`` arguments, or
    None: an EAGLE-3 drafter with pipeline parallelism above 1 where the release cannot carry the
    captures across stages (``pipeline_findings``). The target's model types come from its local
    config.json; a hub id is judged by the release alone."""
    spec = args.speculative or {}
    method = str(spec.get("method") or "").lower()
    # no method: vLLM takes "eagle3" from the drafter's name (config/speculative.py, 0.11-0.32)
    if method != "eagle3" and not (not method and "eagle3" in str(spec.get("model", "")).lower()):
        return None
    types: tuple[str, ...] = ()
    try:
        config = json.loads((Path(args.model) / "config.json").read_text(encoding="utf-8"))
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        types = tuple(
            t for t in (config.get("model_type"), text.get("model_type")) if isinstance(t, str)
        )
    except (OSError, ValueError, AttributeError):
        pass
    found = pipeline_findings(args.pipeline_size(), types or ("",), vllm_version)
    return f"{found[0].message}; {found[0].fix}" if found else None
