"""doctor: check an EAGLE-3 drafter against its target before a long model load.

Targets: the DeepSeek-V3 family (DeepSeek-V3/V3.1/V3.2, Kimi-K2/K2.5) and MiniMax-M2.

Everything here is read from the two ``config.json`` files and the drafter's safetensors headers
(JSON, so no torch). The aux-layer rules follow what each vLLM release really reads from the
drafter's config, because a one-layer shift there does not crash: it silently costs acceptance.

Two conventions for an aux layer id ``i``: vLLM captures the residual stream *entering* layer
``i``; SGLang and SpecForge name the *output* of layer ``i`` (SGLang captures at ``i + 1``). So an
id in SpecForge's convention is ``i + 1`` in vLLM's.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from packaging.version import InvalidVersion, Version

from .errors import BadSetting, ModelFilesError, NotWritable
from .fileops import atomic_write

OK, WARNING, PROBLEM = "ok", "warning", "problem"
# What --fix writes is either read from the drafter's own config (known) or vLLM's default put
# there because nothing in the config says which layers the drafter was trained on (guessed).
KNOWN, GUESSED = "known", "guessed"

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
NESTED_KEY = f"eagle_config.{AUX_KEY}"
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
DEEPSEEK_V3_FAMILY = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25")
MINIMAX_M2 = "minimax_m2"

# 0.11.0 always asks the model for its default; 0.11.1 added the top-level key; 0.22.0 also
# falls back to the nested key SpecForge writes, without shifting it.
READS_TOP_LEVEL_FROM = Version("0.11.1")
READS_NESTED_FROM = Version("0.22.0")
KIMI_K25_FROM = Version("0.15.0")
# minimax_m2.py ships from 0.11.1; upstream EAGLE-3 support for it (allow-list entry and
# SupportsEagle3 with the aux capture) is complete from 0.20.0.
MINIMAX_M2_FROM = Version("0.11.1")

# The built-in patches a target family needs; their patch.toml says which releases apply can
# patch (``releases``) and from which one upstream has the change (``fixed_in``).
DEEPSEEK_PATCHES = ("eagle3-whitelist", "supports-eagle3")
KIMI_K25_PATCHES = ("kimi-k25-image-token",)
MINIMAX_M2_PATCHES = ("eagle3-minimax-m2",)

# huggingface_hub's own rule for a repo id (``validate_repo_id``): ``name`` or ``org/name``.
REPO_ID = re.compile(r"(?!.*(--|\.\.))[\w\-.]{1,96}(/[\w\-.]{1,96})?")
# ``hf download`` arrived in huggingface_hub 0.34; older ones have ``huggingface-cli download``.
HF_CLI_FROM = Version("0.34.0")

# safetensors refuses headers above 100 MB; a bigger length means a corrupt or foreign file.
MAX_HEADER_BYTES = 100_000_000
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


@dataclass(frozen=True)
class TargetModel:
    """The facts doctor needs from the target's config (its text config for Kimi-K2.5)."""

    path: str
    model_type: str
    text_model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class DrafterModel:
    path: str
    config: dict[str, Any] = field(repr=False)
    weight_files: tuple[str, ...]
    tensors: dict[str, Tensor] = field(repr=False)

    @property
    def config_path(self) -> Path:
        return Path(self.path) / "config.json"


@dataclass(frozen=True)
class AuxLayerPlan:
    """Which aux layers vLLM will capture for this drafter, and where that choice came from."""

    vllm_ids: tuple[int, ...]  # residual stream entering layer i (vLLM's convention)
    source: str  # top-level | nested | default
    default: tuple[int, ...]
    top_level: tuple[int, ...] | None  # as declared, vLLM's convention
    nested: tuple[int, ...] | None  # as declared, SpecForge's convention (layer outputs)
    trained_ids: tuple[int, ...] | None  # what the drafter expects, in vLLM's convention
    write_ids: tuple[int, ...] | None  # the top-level value ``--fix`` writes, if any
    write_basis: str | None = None  # KNOWN or GUESSED, with write_ids
    write_based_on: str | None = None  # where the value comes from, or what the guess rests on

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The same layers in SGLang/SpecForge's convention: output of layer i."""
        return tuple(i - 1 for i in self.vllm_ids)

    def to_dict(self) -> dict[str, object]:
        def listed(ids: tuple[int, ...] | None) -> list[int] | None:
            return None if ids is None else list(ids)

        return {
            "vllm_ids": list(self.vllm_ids),
            "sglang_ids": list(self.output_ids),
            "source": self.source,
            "default": list(self.default),
            "top_level": listed(self.top_level),
            "nested": listed(self.nested),
            "trained_vllm_ids": listed(self.trained_ids),
            "fix_top_level": listed(self.write_ids),
            "fix_basis": self.write_basis,
            "fix_based_on": self.write_based_on,
        }


@dataclass(frozen=True)
class Finding:
    check: str
    level: str  # ok | warning | problem
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class WrittenValue:
    """One value ``--fix`` wrote, and whether it was known or guessed (and from what)."""

    key: str
    value: object
    basis: str  # KNOWN | GUESSED
    based_on: str

    def describe(self) -> str:
        how = "known, from" if self.basis == KNOWN else "a GUESS, based on"
        return f"{self.key}: {json.dumps(self.value)} ({how} {self.based_on})"


@dataclass(frozen=True)
class AppliedFix:
    config: str
    backup: str
    ids: tuple[int, ...]
    values: tuple[WrittenValue, ...] = ()

    @property
    def guessed(self) -> bool:
        return any(v.basis == GUESSED for v in self.values)

    def to_dict(self) -> dict[str, object]:
        return {
            "config": self.config,
            "backup": self.backup,
            AUX_KEY: list(self.ids),
            "written": [asdict(v) for v in self.values],
        }


@dataclass(frozen=True)
class ModelSource:
    """Where a --model or --drafter argument was found: a directory, or a Hugging Face repo id
    resolved in the local cache (``path`` is then its snapshot folder)."""

    given: str
    path: str
    repo_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"given": self.given, "path": self.path, "repo_id": self.repo_id}


@dataclass
class DoctorReport:
    vllm_version: str
    # None when the two arguments do not play their roles (swapped, or a drafter given as the
    # model): nothing else is judged then, because every other check would be about the wrong file.
    target: TargetModel | None
    drafter: DrafterModel | None
    aux: AuxLayerPlan | None
    findings: list[Finding] = field(default_factory=list)
    fix: AppliedFix | None = None  # what --fix wrote before these findings were taken
    model_source: ModelSource | None = None
    drafter_source: ModelSource | None = None

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == PROBLEM]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        target: dict[str, object] | None = None
        if self.target is not None:
            target = asdict(self.target)
            target["source"] = self.model_source.to_dict() if self.model_source else None
        drafter: dict[str, object] | None = None
        if self.drafter is not None:
            drafter = {
                "path": self.drafter.path,
                "source": self.drafter_source.to_dict() if self.drafter_source else None,
                "architectures": self.drafter.config.get("architectures"),
                "weight_files": list(self.drafter.weight_files),
                "tensors": len(self.drafter.tensors),
            }
        return {
            "ok": self.ok,
            "vllm_version": self.vllm_version,
            "target": target,
            "drafter": drafter,
            "aux_layers": self.aux.to_dict() if self.aux is not None else None,
            "findings": [asdict(f) for f in self.findings],
            "problems": len(self.problems),
            "warnings": len(self.warnings),
            "fix": self.fix.to_dict() if self.fix else None,
        }


# --- reading -------------------------------------------------------------------------------------


def _read_config(directory: Path, role: str) -> dict[str, Any]:
    if not directory.is_dir():
        raise ModelFilesError(f"{role} directory {directory} does not exist")
    path = directory / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelFilesError(f"{role} directory {directory} has no config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFilesError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ModelFilesError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path} is not a JSON object")
    return data


def _positive_int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    # bool is an int to Python, never a size to a model config
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def read_target(directory: str | Path) -> TargetModel:
    """The target's hidden size, layer count and vocabulary, from ``text_config`` when it has one."""
    root = Path(directory)
    return target_from_config(root, _read_config(root, "model"))


def target_from_config(root: Path, config: dict[str, Any]) -> TargetModel:
    text = config.get("text_config")
    text_config = text if isinstance(text, dict) else config
    path = root / "config.json"
    values: dict[str, int] = {}
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        value = _positive_int(text_config, key)
        if value is None and key == "vocab_size":
            value = _positive_int(config, key)
        if value is None:
            where = "text_config" if text_config is not config else "the top level"
            raise ModelFilesError(f"{path} has no positive integer {key} at {where}")
        values[key] = value
    model_type = str(config.get("model_type", ""))
    return TargetModel(
        path=str(root),
        model_type=model_type,
        text_model_type=str(text_config.get("model_type", model_type)),
        hidden_size=values["hidden_size"],
        num_layers=values["num_hidden_layers"],
        vocab_size=values["vocab_size"],
    )


def read_safetensors_header(path: str | Path) -> dict[str, Tensor]:
    """Tensor names, dtypes and shapes of one safetensors file, from its JSON header only."""
    file = Path(path)

    def corrupt(why: str) -> ModelFilesError:
        return ModelFilesError(f"{file} is not a readable safetensors file: {why}")

    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise corrupt(f"{size} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise corrupt(f"header length {length} does not fit in {size} bytes")
            raw = fh.read(length)
    except OSError as exc:
        raise ModelFilesError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise corrupt("the header is not JSON") from None
    if not isinstance(header, dict):
        raise corrupt("the header is not a JSON object")
    data_bytes = size - 8 - length
    tensors: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise corrupt(f"entry {name!r} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not _int_list(shape, minimum=0):
            raise corrupt(f"entry {name!r} has no valid dtype and shape")
        if (
            not _int_list(offsets, minimum=0)
            or len(offsets) != 2
            or not offsets[0] <= offsets[1] <= data_bytes
        ):
            raise corrupt(
                f"entry {name!r} has data_offsets {offsets} outside the {data_bytes} data bytes"
            )
        width = DTYPE_BYTES.get(dtype)
        if width is not None and offsets[1] - offsets[0] != width * math.prod(shape):
            raise corrupt(
                f"entry {name!r} holds {offsets[1] - offsets[0]} bytes, not {dtype} x {shape}"
            )
        tensors[name] = Tensor(dtype=dtype, shape=tuple(shape))
    return tensors


def _int_list(value: object, minimum: int | None = None) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)
        for v in value
    )


def read_drafter(directory: str | Path, config: dict[str, Any] | None = None) -> DrafterModel:
    """The drafter's config and, when it ships safetensors, the tensors they declare."""
    root = Path(directory)
    if config is None:
        config = _read_config(root, "drafter")
    files = sorted(root.glob("*.safetensors"))
    tensors: dict[str, Tensor] = {}
    for file in files:
        tensors.update(read_safetensors_header(file))
    return DrafterModel(
        path=str(root),
        config=config,
        weight_files=tuple(f.name for f in files),
        tensors=tensors,
    )


# --- where a model is: a directory or a Hugging Face repo id ------------------------------------

# Run inside the chosen interpreter (the vLLM venv's, which has huggingface_hub because vLLM
# needs it): the cache is found and read by huggingface_hub itself, as ``vllm serve`` does
# (HF_HOME, HF_HUB_CACHE and the rest of its settings included), offline.
_RESOLVE_SCRIPT = """
import json, sys
try:
    import huggingface_hub
    from huggingface_hub import constants, snapshot_download
except ImportError as exc:
    print(json.dumps({"missing": str(exc)}))
    raise SystemExit(0)
out = {"version": huggingface_hub.__version__, "cache": str(constants.HF_HUB_CACHE)}
try:
    out["path"] = snapshot_download(sys.argv[1], local_files_only=True)
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc).splitlines()[0] if str(exc) else type(exc).__name__
print(json.dumps(out))
"""


def is_repo_id(name: str) -> bool:
    """Whether ``name`` can be a Hugging Face repo id (``org/name`` or ``name``).

    Only asked when ``name`` is not an existing directory: an existing directory wins, as it does
    for vLLM and transformers (``from_pretrained`` looks on disk first).
    """
    return REPO_ID.fullmatch(name) is not None and not name.startswith((".", "-"))


def download_command(repo_id: str, role: str, hub_version: str | None) -> str:
    """The command that puts what doctor reads into the cache (the target's config.json only:
    doctor needs nothing else from a checkpoint that may weigh hundreds of GB)."""
    try:
        new_cli = hub_version is None or Version(hub_version) >= HF_CLI_FROM
    except InvalidVersion:
        new_cli = True
    cli = "hf download" if new_cli else "huggingface-cli download"
    if role == "model":
        return f"{cli} {repo_id} --include config.json"
    return f"{cli} {repo_id}"


def locate_model(given: str | Path, role: str, python: Callable[[], str] | None) -> ModelSource:
    """The directory to read for a --model or --drafter argument.

    An existing directory is taken as it is; otherwise a name shaped like a repo id is looked up
    in the local Hugging Face cache through ``python``'s huggingface_hub, offline (exit 11 with
    the download command when it is not there).
    """
    name = str(given)
    if Path(name).is_dir() or not is_repo_id(name):
        return ModelSource(given=name, path=name)
    exe = python() if python is not None else sys.executable
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        proc = subprocess.run(
            [exe, "-c", _RESOLVE_SCRIPT, name],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelFilesError(f"cannot ask {exe} where {name} is cached: {exc}") from None
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        answer = None
    if not isinstance(answer, dict):
        tail = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise ModelFilesError(f"cannot ask {exe} where {name} is cached: {tail}")
    if "missing" in answer:
        raise ModelFilesError(
            f"{role} {name} is not a directory, and {exe} has no huggingface_hub to look it up as "
            "a Hugging Face repo id: pass --python with the vLLM venv (it has huggingface_hub) "
            "or install vllm-patcher[hf]"
        )
    if "path" not in answer:
        raise ModelFilesError(
            f"{role} {name} is not a directory, and the Hugging Face repo {name} is not in the "
            f"local cache {answer.get('cache')} (doctor reads it offline); download it with: "
            f"{download_command(name, role, answer.get('version'))}"
        )
    return ModelSource(given=name, path=str(answer["path"]), repo_id=name)


# --- the release's aux-layer rules ----------------------------------------------------------------


def release_version(version: str) -> Version:
    """The release a version names (0.15.1 for 0.15.1+cpu); a usage error when it names none."""
    try:
        return Version(Version(version).base_version)
    except InvalidVersion:
        raise BadSetting(
            f"--vllm-version {version!r} is not a vLLM release version (like 0.15.1)"
        ) from None


def reads_top_level_key(version: str) -> bool:
    return release_version(version) >= READS_TOP_LEVEL_FROM


def reads_nested_key(version: str) -> bool:
    return release_version(version) >= READS_NESTED_FROM


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """vLLM's default aux layers for a target of ``num_layers`` decoder layers.

    What a DeepSeek-V3-family model answers to get_eagle3_aux_hidden_state_layers(), and what
    vLLM's SupportsEagle3 default (0.18.0 and later) answers for MiniMax-M2: the same formula.
    """
    return (2, num_layers // 2, num_layers - 3)


def _declared_ids(value: object) -> tuple[int, ...] | None:
    # vLLM takes the key only when it is a non-empty list or tuple; anything else means "absent"
    if isinstance(value, list) and value and _int_list(value):
        return tuple(value)
    return None


def _nested_value(config: dict[str, Any]) -> object:
    eagle = config.get("eagle_config")
    return eagle.get(AUX_KEY) if isinstance(eagle, dict) else None


def aux_layer_plan(config: dict[str, Any], num_layers: int, vllm_version: str) -> AuxLayerPlan:
    """The aux layers ``vllm_version`` will capture for a drafter with this config."""
    top = _declared_ids(config.get(AUX_KEY))
    nested = _declared_ids(_nested_value(config))
    default = default_aux_layers(num_layers)
    if top is not None and reads_top_level_key(vllm_version):
        used, source = top, "top-level"
    elif nested is not None and reads_nested_key(vllm_version):
        used, source = nested, "nested"
    else:
        used, source = default, "default"
    if top is not None:
        trained: tuple[int, ...] | None = top
    elif nested is not None:
        trained = tuple(i + 1 for i in nested)
    else:
        trained = None
    invalid_top = config.get(AUX_KEY) not in (None, []) and top is None
    write = _ids_to_write(top, invalid_top, nested, num_layers, vllm_version)
    ids, basis, based_on = write if write is not None else (None, None, None)
    return AuxLayerPlan(used, source, default, top, nested, trained, ids, basis, based_on)


def _in_range(ids: tuple[int, ...], num_layers: int) -> bool:
    return all(0 <= i < num_layers for i in ids)


def _ids_to_write(
    top: tuple[int, ...] | None,
    invalid_top: bool,
    nested: tuple[int, ...] | None,
    num_layers: int,
    vllm_version: str,
) -> tuple[tuple[int, ...], str, str] | None:
    """The top-level value ``--fix`` writes, KNOWN or GUESSED, and what it rests on."""
    # Only worth writing where the release reads it; an explicit, in-range top-level key is the
    # author's word and stays, even if it disagrees with the nested one.
    if not reads_top_level_key(vllm_version):
        return None
    if top is not None and _in_range(top, num_layers):
        return None
    if nested is not None:
        shifted = tuple(i + 1 for i in nested)
        if not _in_range(shifted, num_layers):
            return None
        return (
            shifted,
            KNOWN,
            f"the drafter's {NESTED_KEY} {_ids(nested)}, SpecForge layer outputs, "
            "+1 into vLLM's convention",
        )
    if top is not None or invalid_top:
        # Nothing in the config says which layers the drafter was trained on: vLLM's default is
        # the likeliest (the layers EAGLE-3 recipes take), never a fact.
        default = default_aux_layers(num_layers)
        what = f"{_ids(top)} lies outside [0, {num_layers})" if top is not None else "is unusable"
        return (
            default,
            GUESSED,
            f"vLLM's default (2, n // 2, n - 3) for the target's {num_layers} layers: the top-level "
            f"{AUX_KEY} {what} and nothing else in the config names the layers the drafter "
            "was trained on",
        )
    return None


# --- the checks -----------------------------------------------------------------------------------


def _ids(ids: tuple[int, ...] | None) -> str:
    return "none" if ids is None else "[" + ", ".join(str(i) for i in ids) + "]"


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
    fix = f'add "{AUX_KEY}": {_ids(ids)} at the top level of {config_path}{guess}'
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

    raw_top, raw_nested = drafter.config.get(AUX_KEY), _nested_value(drafter.config)
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
                f"the top-level {AUX_KEY} {_ids(top)} = {_outputs(top)} disagrees with "
                f"{NESTED_KEY} {_ids(nested)} (SpecForge layer outputs), which means vLLM "
                f"{_ids(shifted)}",
                f"if the drafter was trained with SpecForge/SGLang, set the top-level "
                f"{AUX_KEY} in {cfg} to {_ids(shifted)}",
            )

    if not _in_range(used, n):
        add(
            PROBLEM,
            f"{release} would capture layers {_ids(used)} ({plan.source}), outside the target's [0, {n})",
            _key_fix(cfg, plan)
            if plan.write_ids is not None
            else f"set {AUX_KEY} to layers inside [0, {n}) (vLLM's default is {_ids(plan.default)})",
        )
        return plan, findings
    if trained is not None and not _in_range(trained, n):
        add(
            PROBLEM,
            f"the drafter was trained on layers {_ids(trained)} in vLLM's convention, "
            f"outside the target's [0, {n}): it does not fit this target",
            "use a drafter trained for this target",
        )
        return plan, findings

    if top is not None:
        declared = f"the top-level {AUX_KEY} {_ids(top)}"
    elif nested is not None:
        declared = f"{NESTED_KEY} {_ids(nested)} (SpecForge layer outputs = vLLM {_ids(trained)})"
    if trained is None:
        add(
            OK,
            f"no aux layers declared; {release} uses its default {_ids(used)} = {_outputs(used)}",
        )
    elif plan.source == "top-level":
        add(OK, f"{release} uses the top-level {AUX_KEY} {_ids(top)} = {_outputs(top or ())}")
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
            f"{release} {how}; its default {_ids(used)} = {_outputs(used)} happens to be the "
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
            f"{release} {how} {_ids(used)} = {_outputs(used)}, {_shift(used, trained)}",
            fix,
        )
    return plan, findings


def _is_deepseek_v3(target: TargetModel) -> bool:
    return target.text_model_type in DEEPSEEK_V3_FAMILY or target.model_type in DEEPSEEK_V3_FAMILY


def _is_minimax_m2(target: TargetModel) -> bool:
    return MINIMAX_M2 in (target.model_type, target.text_model_type)


def check_drafter(drafter: DrafterModel, target: TargetModel) -> list[Finding]:
    """Architecture, hidden size, vocabulary and weight names: everything but the aux layers."""
    config, tensors, cfg = drafter.config, drafter.tensors, drafter.config_path
    has_weights = bool(drafter.weight_files)
    findings: list[Finding] = []

    if _is_deepseek_v3(target) or _is_minimax_m2(target):
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
                f"({', '.join(DEEPSEEK_V3_FAMILY)}) nor {MINIMAX_M2}; the aux-layer default "
                "assumed here is theirs",
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
    declared = _positive_int(config, key)
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

    vocab = _positive_int(config, "vocab_size")
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
    draft = _positive_int(drafter.config, "draft_vocab_size")
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


def _family_patches(model_type: str, family_minimax: bool) -> tuple[str, ...]:
    if family_minimax:
        return MINIMAX_M2_PATCHES
    return DEEPSEEK_PATCHES + (KIMI_K25_PATCHES if model_type == "kimi_k25" else ())


def check_release(vllm_version: str, target: TargetModel) -> list[Finding]:
    """A problem when apply can neither patch this release for this target nor finds it upstream.

    Read from the built-in patch folders (``releases`` and ``fixed_in`` in each patch.toml), the
    same facts apply goes by: at or after ``fixed_in`` the change is upstream, which is fine.
    """
    from .patchset import load_catalogue

    minimax = _is_minimax_m2(target)
    family = "MiniMax-M2" if minimax else "DeepSeek-V3-family"
    catalogue = load_catalogue()
    needed = [p for p in catalogue.patches if p.name in _family_patches(target.model_type, minimax)]
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


def _architectures(config: dict[str, Any]) -> list[str]:
    archs = config.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _looks_like_drafter(config: dict[str, Any]) -> bool:
    """An EAGLE head: its architecture says so, or it carries EAGLE-3's aux-layer key."""
    return (
        any("eagle" in a.lower() for a in _architectures(config))
        or AUX_KEY in config
        or isinstance(config.get("eagle_config"), dict)
    )


def _model_types(config: dict[str, Any]) -> set[str]:
    text = config.get("text_config")
    types = {config.get("model_type")}
    if isinstance(text, dict):
        types.add(text.get("model_type"))
    return {t for t in types if isinstance(t, str)}


def _looks_like_target(config: dict[str, Any]) -> bool:
    """A model of a family doctor serves (never an EAGLE head)."""
    known = {*DEEPSEEK_V3_FAMILY, MINIMAX_M2}
    return not _looks_like_drafter(config) and bool(_model_types(config) & known)


def _seen(config: dict[str, Any]) -> str:
    layers = config.get("num_hidden_layers")
    text = config.get("text_config")
    if layers is None and isinstance(text, dict):
        layers = text.get("num_hidden_layers")
    types = "/".join(sorted(_model_types(config))) or "none"
    count = f"{layers} layer{'s' * (layers != 1)}" if isinstance(layers, int) else "no layer count"
    return f"architectures {json.dumps(config.get('architectures'))}, model_type {types}, {count}"


def check_roles(
    model: ModelSource,
    model_config: dict[str, Any],
    drafter: ModelSource,
    drafter_config: dict[str, Any],
) -> list[Finding]:
    """A problem when --model is a drafter or --drafter a target: every other check would then
    judge the wrong file (a swapped pair used to show aux layers [2, 0, -2])."""
    model_is_drafter = _looks_like_drafter(model_config)
    drafter_is_target = _looks_like_target(drafter_config)
    m = f"--model {model.given} ({_seen(model_config)})"
    d = f"--drafter {drafter.given} ({_seen(drafter_config)})"
    if model_is_drafter and (drafter_is_target or not _looks_like_drafter(drafter_config)):
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
    model_config = _read_config(Path(model_source.path), "model")
    drafter_config = _read_config(Path(drafter_source.path), "drafter")
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
    if _is_minimax_m2(target) and release < MINIMAX_M2_FROM:
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


# --- --fix ----------------------------------------------------------------------------------------


def _backup(path: Path, data: bytes) -> Path:
    n = 0
    while True:
        candidate = path.with_name(f"{path.name}.bak" + (f".{n}" if n else ""))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise NotWritable(f"cannot back up {path} to {candidate}: {exc.strerror}") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return candidate


def _indent_of(text: str) -> str | None:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped.startswith('"'):
            return line[: len(line) - len(stripped)] or None
    return None


def write_aux_layer_ids(drafter_dir: str | Path, ids: tuple[int, ...]) -> Path:
    """Set the top-level aux-layer key in the drafter's config.json; return the backup's path.

    The original is copied byte for byte first; other keys keep their values and order, and the
    file is replaced atomically so a concurrent reader never sees half a config.
    """
    path = Path(drafter_dir) / "config.json"
    original = path.read_bytes()
    text = original.decode("utf-8")
    data = json.loads(text)
    data[AUX_KEY] = list(ids)
    rendered = json.dumps(data, indent=_indent_of(text), ensure_ascii=text.isascii())
    if text.endswith("\n"):
        rendered += "\n"
    backup = _backup(path, original)
    atomic_write(path, rendered.encode("utf-8"), mode=path.stat().st_mode & 0o777)
    return backup


def run(
    model_dir: str | Path,
    drafter_dir: str | Path,
    vllm_version: str,
    fix: bool = False,
    python: Callable[[], str] | None = None,
) -> DoctorReport:
    """check(); with ``fix``, write the top-level key it calls for, then check again."""
    report = check(model_dir, drafter_dir, vllm_version, python)
    plan = report.aux
    if not fix or plan is None or plan.write_ids is None or report.drafter is None:
        return report
    source = report.drafter_source
    if source is not None and source.repo_id is not None:
        # the snapshot's config.json links into huggingface_hub's blob store: never edit the cache
        raise BadSetting(
            f"--fix writes the drafter's config.json, and {source.repo_id} is a Hugging Face "
            f"cache entry; copy it to a directory (hf download {source.repo_id} --local-dir DIR) "
            "and pass --drafter DIR"
        )
    ids = plan.write_ids
    written = WrittenValue(
        AUX_KEY, list(ids), plan.write_basis or GUESSED, plan.write_based_on or ""
    )
    backup = write_aux_layer_ids(report.drafter.path, ids)
    after = check(model_dir, drafter_dir, vllm_version, python)
    after.fix = AppliedFix(str(report.drafter.config_path), str(backup), ids, (written,))
    if written.basis == GUESSED:
        # the config now states a value nobody knew: keep saying so until a person confirms it
        after.findings.append(
            Finding(
                "fix",
                WARNING,
                f"--fix wrote {written.key}: {json.dumps(written.value)} as a GUESS, based on "
                f"{written.based_on}",
                f"check it against the drafter's training setup, or restore {backup}",
            )
        )
    return after


# --- serve-args -----------------------------------------------------------------------------------


def speculative_config(
    drafter: str | Path | ModelSource, num_speculative_tokens: int = 3
) -> dict[str, object]:
    """vLLM's ``--speculative-config`` for this drafter (a directory, or a cached repo id, which
    is passed on as its id so vLLM resolves it the same way)."""
    if isinstance(drafter, ModelSource):
        source = drafter
    else:
        source = ModelSource(given=str(drafter), path=str(drafter))
    root = Path(source.path)
    if not (root / "config.json").is_file():
        raise ModelFilesError(f"drafter directory {root} has no config.json")
    return {
        "method": "eagle3",
        # not resolve(): keep the operator's symlinked model paths as they named them
        "model": source.repo_id or os.path.abspath(root),
        "num_speculative_tokens": num_speculative_tokens,
    }
