"""doctor finds why acceptance will be low, before the load: a d2t
written as absolute target ids (vLLM reads offsets), one mapping outside the target's vocabulary
or two draft ids onto one target id; a drafter trained on fewer positions than the target serves,
or with other rope scaling. Each on a drafter written here with the fault, and a correct one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_patcher.doctor import OK, PROBLEM, WARNING

from ..models.model_files import (
    KIMI_VOCAB,
    drafter_weights,
    kimi_target,
    specforge_drafter,
    write_json,
    write_safetensors,
)
from .reports import by_check, check, doctor_json

DRAFT = 8
# a frequency-sorted id map: draft ids 0-4 are target ids 0-4, then 100, 101, 5000
SORTED_TARGET_IDS = [0, 1, 2, 3, 4, 100, 101, 5000]


def _drafter(root: Path, d2t: list[int], **config: object) -> Path:
    weights = drafter_weights()
    weights["d2t"] = ("I64", [len(d2t)])
    path = specforge_drafter(
        root, nested=[2, 30, 58], draft_vocab_size=len(d2t),
        eagle_aux_hidden_state_layer_ids=[3, 31, 59], **config,
    )  # fmt: skip
    write_safetensors(path / "model.safetensors", weights, values={"d2t": d2t})
    return path


@pytest.mark.parametrize(
    ("d2t", "level", "said"),
    [
        ([t - i for i, t in enumerate(SORTED_TARGET_IDS)], OK, "8 offsets, every draft id maps"),
        ([0] * DRAFT, OK, "8 offsets"),
        (SORTED_TARGET_IDS, PROBLEM, "d2t holds absolute target ids (0, 1, ... 5000"),
        ([0] * 7 + [KIMI_VOCAB], PROBLEM, "outside the target's vocabulary of 163840"),
        ([0, 0, 0, 0, 0, 0, 0, -1], WARNING, "1 draft id(s) onto a target id another"),
    ],
)
def test_d2t_is_read_from_its_bytes_and_judged_as_vllm_reads_it(
    tmp_path: Path, d2t: list[int], level: str, said: str
) -> None:
    report = check(kimi_target(tmp_path), _drafter(tmp_path, d2t), "0.15.1")
    [(found, message)] = by_check(report, "d2t")
    assert found == level and said in message, message
    assert report.ok is (level != PROBLEM)


def test_a_d2t_saved_as_floats_is_read_too(tmp_path: Path) -> None:
    """A converter that kept d2t in the weights' float dtype: its values are still the ids."""
    drafter = _drafter(tmp_path, SORTED_TARGET_IDS)
    path = drafter / "model.safetensors"
    from vllm_patcher.models.configs import read_safetensors_header

    start = read_safetensors_header(path)["d2t"]
    raw = bytearray(path.read_bytes())
    import json as _json
    import struct

    length = struct.unpack("<Q", raw[:8])[0]
    header = _json.loads(raw[8 : 8 + length])
    header["d2t"]["dtype"] = "BF16"  # the same ids in bf16: the upper half of each float32
    lo, hi = header["d2t"]["data_offsets"]
    header["d2t"]["data_offsets"] = [lo, lo + 2 * DRAFT]
    bf16 = b"".join(struct.pack("<f", float(v))[2:] for v in SORTED_TARGET_IDS)
    raw[start.start : start.start + 2 * DRAFT] = bf16
    text = _json.dumps(header).encode()
    text += b" " * (length - len(text))
    raw[8 : 8 + length] = text
    path.write_bytes(bytes(raw))
    [(level, message)] = by_check(check(kimi_target(tmp_path), drafter, "0.15.1"), "d2t")
    assert level == PROBLEM and "absolute target ids" in message


def test_absolute_d2t_is_a_problem_the_command_names_with_its_fix(tmp_path: Path) -> None:
    target = kimi_target(tmp_path)
    drafter = _drafter(tmp_path, SORTED_TARGET_IDS)
    code, data = doctor_json("--model", str(target), "--drafter", str(drafter),
                             "--vllm-version", "0.15.1")  # fmt: skip
    [finding] = [f for f in data["findings"] if f["check"] == "d2t"]
    assert code == 1 and finding["level"] == PROBLEM
    assert "d2t[i] = target_id[i] - i" in finding["fix"]


def _with_positions(root: Path, target_extra: dict[str, object]) -> Path:
    target = kimi_target(root)
    config = __import__("json").loads((target / "config.json").read_text())
    config["text_config"].update(target_extra)
    write_json(target / "config.json", config)
    return target


YARN = {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}


@pytest.mark.parametrize(
    ("drafter_extra", "level", "said"),
    [
        ({"max_position_embeddings": 262144, "rope_scaling": YARN}, OK, "cover the target's"),
        (
            {"max_position_embeddings": 2048, "rope_scaling": YARN},
            WARNING,
            "below the target's 262144",
        ),
        (
            {"max_position_embeddings": 262144},
            WARNING,
            "the target's rope scaling is yarn, factor 64.0",
        ),
        (
            {"max_position_embeddings": 262144, "rope_scaling": {"type": "linear", "factor": 2.0}},
            WARNING,
            "the drafter's linear, factor 2.0",
        ),
    ],
)
def test_a_drafter_trained_on_other_positions_is_warned_of(
    tmp_path: Path, drafter_extra: dict[str, object], level: str, said: str
) -> None:
    target = _with_positions(tmp_path, {"max_position_embeddings": 262144, "rope_scaling": YARN})
    drafter = _drafter(tmp_path, [0] * DRAFT, **drafter_extra)
    found = by_check(check(target, drafter, "0.15.1"), "positions")
    assert any(lvl == level and said in msg for lvl, msg in found), found


def test_a_drafter_that_scales_its_rope_where_the_target_does_not_is_warned_of_too(
    tmp_path: Path,
) -> None:
    target = _with_positions(tmp_path, {"max_position_embeddings": 4096})
    drafter = _drafter(tmp_path, [0] * DRAFT, max_position_embeddings=4096, rope_scaling=YARN)
    found = by_check(check(target, drafter, "0.15.1"), "positions")
    assert found == [(WARNING, found[0][1])] and "the target's rope scaling is none" in found[0][1]


def test_a_d2t_that_cannot_be_read_as_ids_is_said_not_passed(tmp_path: Path) -> None:
    drafter = _drafter(tmp_path, [0] * DRAFT)
    path = drafter / "model.safetensors"
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"d2t": {"dtype": "I64"', b'"d2t": {"dtype": "F64"', 1))
    data = bytearray(path.read_bytes())
    from vllm_patcher.models.configs import read_safetensors_header

    start = read_safetensors_header(path)["d2t"].start
    data[start : start + 8 * DRAFT] = b"\x01\0\0\0\0\0\0\0" * DRAFT  # tiny subnormal floats
    path.write_bytes(bytes(data))
    [(level, message)] = by_check(check(kimi_target(tmp_path), drafter, "0.15.1"), "d2t")
    assert level == WARNING and "could not be read as an id map" in message


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"target_num_hidden_layers": 61}, [OK]),  # Kimi-K2.5's 61 layers
        ({"target_num_hidden_layers": 36}, [PROBLEM]),  # a drafter for another size
        ({"eagle_config": {"target_num_hidden_layers": 36}}, [PROBLEM]),
        ({}, []),  # nothing stated: nothing judged
    ],
)
def test_a_drafter_trained_for_another_size_of_the_family_is_named(
    tmp_path: Path, config: dict[str, object], expected: list[str]
) -> None:
    drafter = specforge_drafter(
        tmp_path, nested=[2, 30, 58], eagle_aux_hidden_state_layer_ids=[3, 31, 59], **config
    )
    if "eagle_config" in config:  # keep SpecForge's nested ids beside the stated layer count
        eagle = {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **config["eagle_config"]}  # type: ignore[dict-item]
        drafter = specforge_drafter(
            tmp_path, "drafter2", eagle_aux_hidden_state_layer_ids=[3, 31, 59], eagle_config=eagle
        )
    code, report = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    found = by_check(report, "trained-for")
    assert [level for level, _ in found] == expected, found
    assert code == (1 if PROBLEM in expected else 0), report
    if expected == [PROBLEM]:
        assert "36 layers" in found[0][1] and "61" in found[0][1], found


@pytest.mark.parametrize(
    ("served", "level", "said"),
    [
        ("8192", WARNING, "below --max-model-len 16384"),  # the served context, not the target's
        ("4096", OK, "cover --max-model-len 4096"),  # a served context the drafter covers
    ],
)
def test_the_served_max_model_len_is_what_the_drafter_s_positions_are_judged_against(
    tmp_path: Path, served: str, level: str, said: str
) -> None:
    target = _with_positions(tmp_path, {"max_position_embeddings": 262144, "rope_scaling": YARN})
    drafter = _drafter(tmp_path, [0] * DRAFT, max_position_embeddings=8192, rope_scaling=YARN)
    length = "16384" if level == WARNING else served
    code, report = doctor_json("--model", str(target), "--drafter", str(drafter),
                               "--vllm-version", "0.15.1", "--max-model-len", length)  # fmt: skip
    found = by_check(report, "positions")
    assert [(lvl, said in msg) for lvl, msg in found] == [(level, True)], found
    assert code == 0, report


def test_a_max_model_len_that_is_not_a_positive_number_is_a_usage_error(tmp_path: Path) -> None:
    from ..conftest import run_cli

    proc = run_cli("doctor", "--model", str(kimi_target(tmp_path)), "--drafter", str(tmp_path),
                   "--vllm-version", "0.15.1", "--max-model-len", "0")  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "Error: Invalid value for '--max-model-len'" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "config",
    [
        {"target_num_hidden_layers": "61"},
        {"target_num_hidden_layers": True},
        {"target_num_hidden_layers": 0},
        {"target_num_hidden_layers": 61, "eagle_config": {"target_num_hidden_layers": 60}},
    ],
)
def test_a_trained_for_count_that_cannot_be_read_is_said_not_checked(
    tmp_path: Path, config: dict[str, object]
) -> None:
    drafter = specforge_drafter(tmp_path, eagle_aux_hidden_state_layer_ids=[3, 31, 59], **config)
    _, report = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    [(level, message)] = by_check(report, "trained-for")
    assert level == WARNING and "not checked" in message, message


@pytest.mark.parametrize(
    ("drafter_rope", "target_rope", "same"),
    [
        ({"type": "yarn", "factor": 40.0}, {"rope_type": "yarn", "factor": 40}, True),
        ({"rope_type": "default"}, None, True),
        (
            {"type": "yarn", "factor": 40, "original_max_position_embeddings": 8192},
            {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
            False,
        ),
    ],
)
def test_rope_scaling_is_compared_by_value_not_by_its_text(
    tmp_path: Path, drafter_rope: dict[str, object], target_rope: object, same: bool
) -> None:
    extra: dict[str, object] = {"max_position_embeddings": 262144}
    if target_rope is not None:
        extra["rope_scaling"] = target_rope
    target = _with_positions(tmp_path, extra)
    drafter = _drafter(
        tmp_path, [0] * DRAFT, max_position_embeddings=262144, rope_scaling=drafter_rope
    )
    levels = [level for level, _ in by_check(check(target, drafter, "0.15.1"), "positions")]
    assert levels == ([OK] if same else [WARNING]), levels


def test_a_drafter_without_max_position_embeddings_is_judged_at_llama_s_default(
    tmp_path: Path,
) -> None:
    target = _with_positions(tmp_path, {"max_position_embeddings": 262144, "rope_scaling": YARN})
    drafter = _drafter(tmp_path, [0] * DRAFT, rope_scaling=YARN)
    config = json.loads((drafter / "config.json").read_text())
    config.pop("max_position_embeddings", None)
    write_json(drafter / "config.json", config)
    [(level, message)] = by_check(check(target, drafter, "0.15.1"), "positions")
    assert level == WARNING and "2048 (not in its config" in message, message
