"""Targets whose vLLM class claims EAGLE-3 but captures nothing.

vLLM's MiMo (``model_type`` ``mimo``, ``MiMoForCausalLM``) inherits ``Qwen2ForCausalLM``, which
lists ``SupportsEagle3``, so vLLM takes the claim; but ``MiMoModel.forward`` replaces Qwen2's
loop and never collects the aux hidden states. Read from the wheels of 0.11.0 to 0.34.0 (every
release: ``tests/doctor/test_empty_capture.py`` reads each one's pristine ``mimo.py`` and
``qwen2.py``). Before 0.22.0 vLLM's allow-list refuses the drafter; from 0.22.0 the runner asks
the model for aux layers and gets one tensor back. Either way an EAGLE-3 drafter cannot run on it,
and no patch here adds the capture. The one owner of these facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from ..findings import PROBLEM, WARNING, Finding
from ..models.configs import TargetModel
from ..releases import has_allow_list
from .rules import release_version


@dataclass(frozen=True)
class EmptyCapture:
    model_type: str
    architecture: str  # the class vLLM builds for it
    claims_through: str  # the class that lists SupportsEagle3
    forward: str  # the forward that captures nothing
    last_read: Version  # the newest release read: the fault is there up to it


MIMO = EmptyCapture("mimo", "MiMoForCausalLM", "Qwen2ForCausalLM", "MiMoModel.forward",
                    Version("0.34.0"))  # fmt: skip
EMPTY_CAPTURES = (MIMO,)


def check_capture(target: TargetModel, vllm_version: str) -> list[Finding]:
    """Matched on the target's ``architectures``: the class vLLM builds (its model_type only
    decides what the allow-list, before 0.22.0, says)."""
    release = release_version(vllm_version)
    for fault in EMPTY_CAPTURES:
        if fault.architecture not in target.architectures:
            continue
        claim = (
            f"vLLM's {fault.architecture} lists SupportsEagle3 (through {fault.claims_through}) "
            f"but {fault.forward} captures no aux hidden states"
        )
        if release > fault.last_read:
            return [
                Finding(
                    "capture",
                    WARNING,
                    f"{claim} in every release up to {fault.last_read}; vLLM {vllm_version} was "
                    "not read: check that its forward collects them before the load",
                )
            ]
        when = (
            "the engine gets no aux layers from it, where its allow-list lets the drafter through"
            if has_allow_list(release)
            else "the runner asks it for aux layers and gets one tensor back: the engine fails"
        )
        return [
            Finding(
                "capture",
                PROBLEM,
                f"{claim} (0.11.0 to {fault.last_read}): on vLLM {vllm_version} {when}",
                f"serve this target without an EAGLE-3 drafter; no vLLM release up to "
                f"{fault.last_read} and no patch here captures for {fault.model_type}",
            )
        ]
    return []
