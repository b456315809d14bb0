"""Known failures measured on a GPU, each with the workaround measured there: doctor and serve-args
warn before the load; rehearse names the failure when the engine dies of it
(``rehearse.failures``). The one owner of each fact below.

The Granite graph failure (issues 34 and 58). Measured on vLLM 0.25.0 (torch 2.11, CUDA 13), on
an H200 and an H100, with ``eagle3-granite`` applied, a granite-3.3-8b-shaped target (hidden
4096) and a one-layer EAGLE-3 drafter, dummy weights:
- CUDA graphs on (vLLM's default, ``FULL_AND_PIECEWISE``): the engine dies with ``CUDA error: an
  illegal memory access was encountered`` while the V2 model runner captures the drafter's FULL
  prefill graphs. ``LlamaForCausalLM`` at the identical shape, drafter and KV cache size (22230
  blocks) serves; Granite with every muP multiplier neutral (Llama's arithmetic) and Granite with
  8 layers still crash: not the KV cache, not Granite's numbers, not the depth.
- ``cudagraph_mode`` ``FULL_DECODE_ONLY``: the profile run dies in the drafter's
  ``combine_hidden_states`` (``mat1 and mat2 shapes cannot be multiplied (8192x4096 and
  12288x4096)``): the drafter got one 4096-wide aux hidden state where EAGLE-3 needs three.
  Llama at 40 layers in the same mode serves.
So the failure follows our Granite path, not a vLLM kernel: it is this tool's until a
reproduction without our code says otherwise (issue 58). PIECEWISE graphs started and drafted, but
with dummy weights drafts say nothing about whether the drafter got the right states, so
PIECEWISE is not offered as proven. ``--enforce-eager`` and the V1 model runner
(``VLLM_USE_V2_MODEL_RUNNER=0``) take the failing path out. Tiny Granite models (hidden 128)
speculate at 100% / 1.7% (right / shifted aux layers) under graphs, which is why the earlier proof
did not see it. The V2 model runner is the default for dense unquantized targets from 0.22.0
(0.20.x-0.21.x default to V1); from 0.32.0 Granite's EAGLE-3 is upstream (the same capture as
ours, line for line) and not measured here.
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
            f"under CUDA graphs (vLLM's default) on the V2 model runner at real sizes: "
            f"{self.what} ({self.measured}; root cause open, not shown to be vLLM's)",
            f"serve with {self.workaround}",
        )


GRANITE_DRAFTER_GRAPHS = KnownFailure(
    key="granite-drafter-graphs",
    architectures=("GraniteForCausalLM",),
    model_types=("granite",),
    releases=SpecifierSet(">=0.22.0,<0.32.0"),
    what="an illegal memory access while the drafter's FULL prefill graphs are captured, and "
    "with FULL_DECODE_ONLY graphs the drafter receives one aux hidden state where three are due",
    workaround="--enforce-eager, or the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0); PIECEWISE "
    "graphs start and draft but are not proven to feed the drafter the right states",
    measured="measured on vLLM 0.25.0, granite-3.3-8b shape; 0.22.0-0.31.x take the same path",
    patch="eagle3-granite",
)
FAULTS = (GRANITE_DRAFTER_GRAPHS,)


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
