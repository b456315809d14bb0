"""doctor on hostile model folders: a FIFO where a config.json or a
safetensors file should be, JSON nested 200,000 deep, a header claiming 600,000 dimensions of
2**32, a model_type that is a list or an object. Each is one error line and exit 11 within
seconds: never a hang, never a traceback (the tests' timeouts fail a hang)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from ..conftest import assert_refused, run_cli
from .model_files import ready_kimi_pair


def _doctor(model: Path, drafter: Path):  # type: ignore[no-untyped-def]
    args = ("--model", str(model), "--drafter", str(drafter), "--vllm-version", "0.15.1")
    return run_cli("doctor", *args, timeout=60)


def _header(path: Path, raw: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)


@pytest.mark.parametrize("where", ["target-config", "drafter-config", "drafter-weights"])
def test_a_fifo_in_place_of_a_file_is_refused_not_waited_on(tmp_path: Path, where: str) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    victim = {
        "target-config": model / "config.json",
        "drafter-config": drafter / "config.json",
        "drafter-weights": drafter / "model.safetensors",
    }[where]
    victim.unlink()
    os.mkfifo(victim)
    assert_refused(_doctor(model, drafter), 11, str(victim), "not a regular file")


def test_json_nested_too_deep_is_refused_in_a_config_and_in_a_header(tmp_path: Path) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    deep = "[" * 200_000 + "]" * 200_000
    (model / "config.json").write_text(deep)
    assert_refused(_doctor(model, drafter), 11, "nests its JSON too deeply")
    model, drafter = ready_kimi_pair(tmp_path / "again")
    _header(drafter / "model.safetensors", f'{{"w": {deep}}}'.encode())
    assert_refused(_doctor(model, drafter), 11, "nests too deeply")


def test_a_header_claiming_600000_dimensions_is_refused_at_once(tmp_path: Path) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    shape = [2**32] * 600_000
    entry = {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}
    _header(drafter / "model.safetensors", json.dumps({"w": entry}).encode())
    assert_refused(_doctor(model, drafter), 11, "claims 600000 dimensions")


@pytest.mark.parametrize("value", [["deepseek_v3"], {"a": 1}])
def test_a_model_type_that_is_not_a_string_is_refused(tmp_path: Path, value: object) -> None:
    model, drafter = ready_kimi_pair(tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = value
    (model / "config.json").write_text(json.dumps(config))
    assert_refused(_doctor(model, drafter), 11, "model_type is not a string")
    config["model_type"] = "kimi_k25"
    config["text_config"]["model_type"] = value
    (model / "config.json").write_text(json.dumps(config))
    assert_refused(_doctor(model, drafter), 11, "text_config.model_type is not a string")
