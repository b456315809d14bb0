"""The target's and the drafter's configs and the drafter's safetensors headers, read without torch
(the headers are JSON)."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import ModelFilesError

AUX_KEY = "eagle_aux_hidden_state_layer_ids"


NESTED_KEY = f"eagle_config.{AUX_KEY}"


# safetensors refuses headers above 100 MB; a bigger length means a corrupt or foreign file.
MAX_HEADER_BYTES = 100_000_000
MAX_DIMS = 16  # a tensor's dimensions in a safetensors header (real weights have 1 to 4)


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


INT_FORMATS = {"I64": "q", "I32": "i", "U32": "I", "I16": "h", "U8": "B", "I8": "b"}
FLOAT_FORMATS = {"F64": "d", "F32": "f", "F16": "e", "BF16": "f"}  # an id map saved as floats


@dataclass(frozen=True)
class TargetModel:
    """The facts doctor needs from the target's config (its text config for Kimi-K2.5)."""

    path: str
    model_type: str
    text_model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    max_positions: int | None = None  # max_position_embeddings
    rope_scaling: dict[str, Any] | None = field(default=None, compare=False)
    architectures: tuple[str, ...] = field(default=(), compare=False)  # the class vLLM builds


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    file: str = field(default="", compare=False)  # where its bytes are
    start: int = field(default=0, compare=False)  # their offset in that file

    def integers(self, limit: int = 1 << 20) -> list[int] | None:
        """The values of a small integer tensor, read from its bytes (no torch); None when it is
        not one (another dtype, over ``limit`` values) or cannot be read."""
        fmt = INT_FORMATS.get(self.dtype) or FLOAT_FORMATS.get(self.dtype)
        count = math.prod(self.shape)
        if fmt is None or not self.file or count > limit:
            return None
        width = 2 if self.dtype == "BF16" else struct.calcsize(fmt)
        try:
            with open(self.file, "rb") as fh:
                fh.seek(self.start)
                raw = fh.read(width * count)
        except OSError:
            return None
        if len(raw) != width * count:
            return None
        if self.dtype == "BF16":  # the upper half of a float32
            raw = b"".join(b"\0\0" + raw[i : i + 2] for i in range(0, len(raw), 2))
        values = struct.unpack(f"<{count}{fmt}", raw)
        if fmt in "efd" and not all(float(v).is_integer() for v in values):
            return None  # not an id map
        return [int(v) for v in values]


@dataclass(frozen=True)
class DrafterModel:
    path: str
    config: dict[str, Any] = field(repr=False)
    weight_files: tuple[str, ...]
    tensors: dict[str, Tensor] = field(repr=False)

    @property
    def config_path(self) -> Path:
        return Path(self.path) / "config.json"


def read_config(directory: Path, role: str) -> dict[str, Any]:
    if not directory.is_dir():
        raise ModelFilesError(f"{role} directory {directory} does not exist")
    path = directory / "config.json"
    if path.exists() and not path.is_file():  # a FIFO would block the read for ever
        raise ModelFilesError(f"{path} is not a regular file")
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
    except RecursionError:
        raise ModelFilesError(f"{path} nests its JSON too deeply to be a model config") from None
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path} is not a JSON object")
    return data


def positive_int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    # bool is an int to Python, never a size to a model config
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def read_target(directory: str | Path) -> TargetModel:
    """The target's hidden size, layer count and vocabulary, from ``text_config`` when it has one."""
    root = Path(directory)
    return target_from_config(root, read_config(root, "model"))


def target_from_config(root: Path, config: dict[str, Any]) -> TargetModel:
    text = config.get("text_config")
    text_config = text if isinstance(text, dict) else config
    path = root / "config.json"
    values: dict[str, int] = {}
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        value = positive_int(text_config, key)
        if value is None and key == "vocab_size":
            value = positive_int(config, key)
        if value is None:
            where = "text_config" if text_config is not config else "the top level"
            raise ModelFilesError(f"{path} has no positive integer {key} at {where}")
        values[key] = value
    for where, holder in (("", config), ("text_config.", text_config)):
        if not isinstance(holder.get("model_type", ""), str):
            raise ModelFilesError(f"{path}: {where}model_type is not a string")
    model_type = str(config.get("model_type", ""))
    rope = text_config.get("rope_scaling")
    if not isinstance(rope, dict):  # transformers v5 writes rope_parameters
        rope = text_config.get("rope_parameters")
    archs = config.get("architectures")
    return TargetModel(
        path=str(root),
        model_type=model_type,
        text_model_type=str(text_config.get("model_type", model_type)),
        hidden_size=values["hidden_size"],
        num_layers=values["num_hidden_layers"],
        vocab_size=values["vocab_size"],
        max_positions=positive_int(text_config, "max_position_embeddings"),
        rope_scaling=rope if isinstance(rope, dict) else None,
        architectures=tuple(a for a in archs if isinstance(a, str))
        if isinstance(archs, list)
        else (),
    )


def read_safetensors_header(path: str | Path) -> dict[str, Tensor]:
    """Tensor names, dtypes and shapes of one safetensors file, from its JSON header only."""
    file = Path(path)

    def corrupt(why: str) -> ModelFilesError:
        return ModelFilesError(f"{file} is not a readable safetensors file: {why}")

    if file.exists() and not file.is_file():  # a FIFO would block the read for ever
        raise corrupt("not a regular file")
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
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise corrupt("the header is not JSON (or nests too deeply)") from None
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
        if not isinstance(dtype, str) or not int_list(shape, minimum=0):
            raise corrupt(f"entry {name!r} has no valid dtype and shape")
        if len(shape) > MAX_DIMS:
            # bounded before any arithmetic: a claim of 600,000 dimensions of 2**32 took minutes
            raise corrupt(f"entry {name!r} claims {len(shape)} dimensions (at most {MAX_DIMS})")
        if (
            not int_list(offsets, minimum=0)
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
        tensors[name] = Tensor(dtype, tuple(shape), str(file), 8 + length + offsets[0])
    return tensors


def int_list(value: object, minimum: int | None = None) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)
        for v in value
    )


def read_drafter(directory: str | Path, config: dict[str, Any] | None = None) -> DrafterModel:
    """The drafter's config and, when it ships safetensors, the tensors they declare."""
    root = Path(directory)
    if config is None:
        config = read_config(root, "drafter")
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
