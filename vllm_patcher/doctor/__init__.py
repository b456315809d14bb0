"""doctor: check an EAGLE-3 drafter against its target before a long model load.

Targets: every family a patch is for (``catalogue.targets``: the DeepSeek-V3 family, MiniMax-M2,
Granite and each ``[family]`` table of the catalogue).

Everything is read from the two ``config.json`` files and the drafter's safetensors headers
(``vllm_patcher.models``). The aux-layer rules (``rules``) follow what each vLLM release really
reads from the drafter's config, because a one-layer shift there does not crash: it silently costs
acceptance. ``checks`` judges (``aux_layers`` and ``drafter`` hold the two big checks; ``acceptance``
those of a drafter that runs but will rarely be accepted: its d2t map, its positions, the target
it was trained for), ``flags`` the drafter flags each release reads, ``empty_capture`` the targets
whose vLLM class claims EAGLE-3 and captures nothing, ``kv_page`` a hybrid target whose KV page cannot
hold the drafter's, ``faults`` vLLM's own faults measured on a
GPU with their workarounds, ``upgrade`` the one release every fix that needs a newer vLLM
names, ``fix`` writes the key ``--fix`` can, ``serve_args`` prints the speculative config;
``doctor_report`` holds what doctor found, for the renderers.
"""

from __future__ import annotations

from ..findings import OK, PROBLEM, WARNING, Finding
from .aux_layers import check_aux_layers
from .checks import check, check_release, check_roles
from .doctor_report import AppliedFix, DoctorReport, WrittenValue
from .drafter import check_drafter
from .fix import run, write_aux_layer_ids
from .rules import (
    GUESSED,
    KNOWN,
    AuxLayerPlan,
    aux_layer_plan,
    default_aux_layers,
    reads_nested_key,
    reads_top_level_key,
    release_version,
)
from .serve_args import speculative_config

__all__ = [
    "GUESSED",
    "KNOWN",
    "OK",
    "PROBLEM",
    "WARNING",
    "AppliedFix",
    "AuxLayerPlan",
    "DoctorReport",
    "Finding",
    "WrittenValue",
    "aux_layer_plan",
    "check",
    "check_aux_layers",
    "check_drafter",
    "check_release",
    "check_roles",
    "default_aux_layers",
    "reads_nested_key",
    "reads_top_level_key",
    "release_version",
    "run",
    "speculative_config",
    "write_aux_layer_ids",
]
