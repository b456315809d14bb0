"""Known failures measured on a GPU, each with the workaround measured there: doctor and serve-args
warn before the load; rehearse names the failure when the engine dies of it
(``rehearse.failures``). The one owner of each fact below. None is open now (``FAULTS``).

The Granite graph failure (fixed; its measurements, dated, are in docs/gpu-proof.md). With an
older capture of the backport, vLLM 0.25.0 (torch 2.11, CUDA 13; H200 and H100) dies with ``CUDA
error: an illegal memory access was encountered`` while the V2 model runner captures the drafter's
FULL prefill graphs for a Granite target at real size (granite-3.3-8b's shape, and 8 of its
layers), and with a CUBLAS execution failure in ``FULL_DECODE_ONLY``; Llama at the identical shape
serves. The cause is the backport's, not vLLM's: that capture appended the layer's output itself,
the very tensor the next layer is given (a Granite layer adds its own residual), and under vLLM's
compiled CUDA graphs that tensor does not stay the drafter's. The same engine with the capture made a tensor of
its own is ready and drafts (8 and 40 layers), and the controlled pair at hidden 4096 speculates at
144/144 right and 9/537 shifted in eager, PIECEWISE, FULL_DECODE_ONLY and FULL_AND_PIECEWISE
(``tests/gpu/aux_probe.py``, docs/gpu-proof.md). A venv patched before the fix shows
``eagle3-granite`` outdated (``status``; doctor's ``venv`` check), and ``apply`` brings the fix.
Upstream's own Granite (0.32.0) and Granite MoE (0.33.0) capture the layer's output the old way;
not measured here (their torch 2.13 and 2.14 do not run on the lent GPU's image).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from ..findings import WARNING, Finding
from ..releases import release_of
from ..serving.args import option_name

PIECEWISE_FLAG = """--compilation-config '{"cudagraph_mode": "PIECEWISE"}'"""
CHECK = "known-failure"  # doctor's check name for these warnings


@dataclass(frozen=True)
class KnownFailure:
    key: str
    architectures: tuple[str, ...]  # the target classes it hits (as vLLM resolves them)
    model_types: tuple[str, ...]  # their config.json model_type (what doctor reads)
    releases: SpecifierSet  # where vLLM's default takes the failing path
    what: str  # what happens, in a sentence
    workaround: str  # what to add to vllm serve, measured
    measured: str  # where it was measured
    patch: str  # the patch whose path it is

    def hits(self, architecture: str | None, vllm_version: str) -> bool:
        return architecture in self.architectures and release_of(vllm_version) in self.releases

    def hits_model_type(self, model_type: str, vllm_version: str) -> bool:
        return model_type in self.model_types and release_of(vllm_version) in self.releases

    def finding(self, vllm_version: str) -> Finding:
        return Finding(
            CHECK,
            WARNING,
            f"on vLLM {vllm_version}, {self.patch}'s {'/'.join(self.architectures)} path fails "
            f"with vLLM's defaults: {self.what} ({self.measured})",
            f"serve with {self.workaround}",
        )


# Fixed: kept to name the crash of a venv still patched the old way (rehearse).
GRANITE_DRAFTER_GRAPHS = KnownFailure(
    key="granite-drafter-graphs",
    architectures=("GraniteForCausalLM",),
    model_types=("granite",),
    releases=SpecifierSet(">=0.22.0,<0.32.0"),
    what="an illegal memory access while the drafter's CUDA graphs are captured, with the "
    "capture eagle3-granite made before 2026-12-06 (the tensor the next layer is given)",
    workaround="vllm-patcher apply (the fixed capture; status shows eagle3-granite outdated)",
    measured="measured on vLLM 0.25.0, granite-3.3-8b shape; fixed in the patch",
    patch="eagle3-granite",
)
FAULTS: tuple[KnownFailure, ...] = ()  # none open


def known(architecture: str | None, vllm_version: str) -> list[KnownFailure]:
    """The known failures a target class meets on a release with vLLM's default settings."""
    return [f for f in FAULTS if f.hits(architecture, vllm_version)]


def findings(model_type: str, vllm_version: str) -> list[Finding]:
    """doctor's warnings for a target's model_type on a release (vLLM's defaults assumed: doctor
    does not see the serve arguments)."""
    return [f.finding(vllm_version) for f in FAULTS if f.hits_model_type(model_type, vllm_version)]


_EAGER, _NO_EAGER = "--enforce-eager", "--no-enforce-eager"
_CC, _LEVEL = "--compilation-config", "--optimization-level"
_KNOWN = (_EAGER, _NO_EAGER, _CC, _LEVEL)
_CC_DOTTED = ("-cc.", "--compilation-config.", "--compilation_config.")
# cudagraph modes off the failing path: none (CUDAGraphMode NONE = 0). PIECEWISE (1) started and
# drafted at 8B shape but is not proven to feed the drafter the right states; FULL_DECODE_ONLY
# fails: neither is counted
_SAFE_MODES = {"NONE", "0"}
# --optimization-level (-O): 0 captures no graphs (vLLM's OPTIMIZATION_LEVEL_00 in
# config/vllm.py, 0.25.0); 1 captures piecewise ones; a cudagraph_mode given beside it wins
_SAFE_LEVELS = {"0"}


def _mode(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str):
        return str(value).strip().upper()
    return None


def _json_mode(value: str) -> tuple[bool, str | None]:
    """(valid JSON object, its cudagraph_mode)."""
    try:
        config = json.loads(value)
    except json.JSONDecodeError:
        return False, None
    if not isinstance(config, dict):
        return False, None
    return True, _mode(config.get("cudagraph_mode"))


def _runner_v1(env: Mapping[str, str]) -> bool:
    """VLLM_USE_V2_MODEL_RUNNER as vLLM reads it (``bool(int(v))``; anything else it refuses)."""
    try:
        return int(env.get("VLLM_USE_V2_MODEL_RUNNER", "").strip()) == 0
    except ValueError:
        return False


def avoided(serve_args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the server's arguments or environment take it off the failing path (eager mode,
    no CUDA graphs, or the V1 model runner), read as vLLM reads them: the
    last of repeated flags wins, a whole ``--compilation-config``/``-cc`` replaces an earlier one,
    and the dotted ``-cc.KEY=VALUE`` pieces, merged, come last. Where unsure: not avoided."""
    if _runner_v1(env):
        return True
    eager, whole_mode, dotted_mode, level = False, None, None, None
    dotted = False  # vLLM merges the dotted pieces into one JSON that replaces any whole one
    args = list(serve_args)
    i = 0
    while i < len(args):
        arg = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(_CC_DOTTED):
            key, eq, value = arg.partition("=")
            if not eq:
                value, i = nxt, i + 1
            dotted = True
            if key.split(".", 1)[1] == "cudagraph_mode":
                dotted_mode = _mode(value)
        elif arg.startswith("-O") and not arg.startswith("--"):
            if arg == "-O":
                level, i = nxt.strip(), i + 1
            else:
                level = arg[3:] if arg[2:3] == "=" else arg[2:]
        else:
            name, given = option_name(arg, _KNOWN)
            if name == "-cc":
                name = _CC
            if name in (_EAGER, _NO_EAGER):
                eager = name == _EAGER and given is None  # "=x" is refused by vLLM's parser
            elif name in (_CC, _LEVEL):
                if given is None:
                    given, i = nxt, i + 1
                if name == _LEVEL:
                    level = given.strip()
                else:
                    valid, mode = _json_mode(given)
                    whole_mode = mode if valid else whole_mode
        i += 1
    if eager:
        return True
    mode = dotted_mode if dotted else whole_mode
    if mode is not None:
        return mode in _SAFE_MODES
    return level in _SAFE_LEVELS
