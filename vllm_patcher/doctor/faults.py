"""Faults of vLLM itself that no patch here cures, measured on a GPU, each with the workaround
measured there. doctor and serve-args warn before the load; rehearse names the fault when the
engine dies of it (``rehearse.failures``). The one owner of each fact below.

The Granite drafter-graph fault (issue 34), measured on vLLM 0.25.0 with an H200 (torch 2.11,
CUDA 13), a granite-3.3-8b-shaped target and a one-layer EAGLE-3 drafter, dummy weights:
- CUDA graphs on (vLLM's default, ``FULL_AND_PIECEWISE``): the engine dies with ``CUDA error: an
  illegal memory access was encountered``, raised in FlashAttention 3's split-KV combine kernel
  (``flash_fwd_combine_launch_template.h``, under CUDA_LAUNCH_BLOCKING=1) while the V2 model
  runner captures the drafter's FULL prefill graphs (26, 42 or 46 of 49 sizes, varying with the
  KV cache's size). Five runs, each ending so.
- Unchanged with our capture copied (``hidden_states.clone()``), the attention scale 1/sqrt(128),
  untied embeddings, or every muP multiplier at 1.0: none of the Granite-specific parts our
  backport or the config brings decides it. Our forward is upstream's own Granite change (0.32.0)
  line for line. ``LlamaForCausalLM`` at the identical shape and drafter: ready.
- Works: ``cudagraph_mode`` PIECEWISE (ready in 128 s, drafts counted), the V1 model runner
  (``VLLM_USE_V2_MODEL_RUNNER=0``), ``--enforce-eager``. Tiny Granite models (hidden 128): fine
  with graphs on, acceptance 100% / 1.7% as in eager mode.
The releases: the V2 model runner is the default for dense unquantized targets from 0.22.0 and
captures the drafter's prefill in FULL graphs there (read from the wheels 0.20.0-0.31.0; 0.20.x
and 0.21.0 default to the V1 runner). From 0.32.0 Granite's EAGLE-3 is upstream and not measured
here (its torch 2.13 does not run on the lent GPU's image).
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


@dataclass(frozen=True)
class EngineFault:
    key: str
    architectures: tuple[str, ...]  # the target classes it hits (as vLLM resolves them)
    model_types: tuple[str, ...]  # their config.json model_type (what doctor reads)
    releases: SpecifierSet  # where vLLM's default takes the failing path
    what: str  # what happens, in a sentence
    workaround: str  # what to add to vllm serve, measured
    measured: str  # where it was measured

    def hits(self, architecture: str | None, vllm_version: str) -> bool:
        return architecture in self.architectures and release_of(vllm_version) in self.releases

    def hits_model_type(self, model_type: str, vllm_version: str) -> bool:
        return model_type in self.model_types and release_of(vllm_version) in self.releases

    def finding(self, vllm_version: str) -> Finding:
        return Finding(
            "engine-fault",
            WARNING,
            f"vLLM {vllm_version} with CUDA graphs on (its default) dies while capturing the "
            f"drafter's CUDA graphs for a {'/'.join(self.architectures)} target: {self.what} "
            f"(a fault of vLLM, not of the patch; {self.measured})",
            f"serve with {self.workaround}",
        )


GRANITE_DRAFTER_GRAPHS = EngineFault(
    key="granite-drafter-graphs",
    architectures=("GraniteForCausalLM",),
    model_types=("granite",),
    releases=SpecifierSet(">=0.22.0,<0.32.0"),
    what="CUDA error: an illegal memory access was encountered, in the V2 model runner's FULL "
    "graph capture of the drafter's prefill",
    workaround=f"{PIECEWISE_FLAG} (measured: ready, drafts counted), or the V1 model runner "
    "(VLLM_USE_V2_MODEL_RUNNER=0, measured: ready), or --enforce-eager",
    measured="measured on vLLM 0.25.0 on an H200, granite-3.3-8b shape; 0.22.0-0.31.x take the "
    "same code path",
)
FAULTS = (GRANITE_DRAFTER_GRAPHS,)


def known(architecture: str | None, vllm_version: str) -> list[EngineFault]:
    """The faults a target class meets on a release with vLLM's default settings."""
    return [f for f in FAULTS if f.hits(architecture, vllm_version)]


def findings(model_type: str, vllm_version: str) -> list[Finding]:
    """doctor's warnings for a target's model_type on a release (vLLM's defaults assumed: doctor
    does not see the serve arguments)."""
    return [f.finding(vllm_version) for f in FAULTS if f.hits_model_type(model_type, vllm_version)]


_EAGER, _NO_EAGER = "--enforce-eager", "--no-enforce-eager"
_CC, _LEVEL = "--compilation-config", "--optimization-level"
_KNOWN = (_EAGER, _NO_EAGER, _CC, _LEVEL)
_CC_DOTTED = ("-cc.", "--compilation-config.", "--compilation_config.")
# cudagraph modes off the failing path: none, or piecewise only (CUDAGraphMode NONE = 0,
# PIECEWISE = 1); FULL_DECODE_ONLY was not measured, so it is not counted
_SAFE_MODES = {"NONE", "PIECEWISE", "0", "1"}
# --optimization-level (-O): 0 captures no graphs, 1 piecewise ones (vLLM's OPTIMIZATION_LEVEL_00,
# _01 in config/vllm.py, 0.25.0); a cudagraph_mode given beside it wins
_SAFE_LEVELS = {"0", "1"}


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
    graphs other than FULL for the drafter, or the V1 model runner), read as vLLM reads them: the
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
