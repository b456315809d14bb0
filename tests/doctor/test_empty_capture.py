"""doctor's ``capture`` check: a target whose vLLM class claims EAGLE-3 but
captures nothing. The claim and the empty forward are read again here from the pristine
``mimo.py`` and ``qwen2.py`` of every release 0.11.0-0.34.0; doctor names a MiMo target on each
and says a release past the last one read was not read."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from vllm_patcher.doctor import PROBLEM, WARNING
from vllm_patcher.doctor.empty_capture import MIMO
from vllm_patcher.wheels import sources

from ..models.model_files import specforge_drafter, write_json
from .reports import by_check, doctor_json
from .test_drafter_flags import RELEASES

MODELS = "vllm/model_executor/models/"


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _bases(cls: ast.ClassDef) -> set[str]:
    return {b.id for b in cls.bases if isinstance(b, ast.Name)}


def _forward(cls: ast.ClassDef) -> ast.FunctionDef:
    return next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward")


def _captures(function: ast.FunctionDef) -> bool:
    """Anything a capture needs: an aux list, the mixin's helper, a tuple returned."""
    for node in ast.walk(function):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if "aux_hidden" in name or name == "_maybe_add_hidden_state":
                return True
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            return True
    return False


@pytest.fixture(scope="module")
def trees() -> dict[str, Path]:
    cache = sources.cache_root() / "drafter-class"
    wanted = [MODELS + "mimo.py", MODELS + "qwen2.py"]
    return {v: sources.fetch_release(v, wanted, cache=cache) / MODELS for v in RELEASES}


def test_every_release_s_mimo_claims_eagle3_and_its_forward_captures_nothing(
    trees: dict[str, Path],
) -> None:
    assert RELEASES[-1] == str(MIMO.last_read)
    for version, models in trees.items():
        mimo, qwen2 = _classes(models / "mimo.py"), _classes(models / "qwen2.py")
        assert MIMO.claims_through in _bases(mimo[MIMO.architecture]), version
        assert "SupportsEagle3" in _bases(qwen2[MIMO.claims_through]), version
        model_class = MIMO.forward.split(".")[0]
        assert not _captures(_forward(mimo[model_class])), version
        # and the reader is not blind: Qwen2's own forward captures in every release
        assert _captures(_forward(qwen2["Qwen2Model"])), version


def _mimo_target(root: Path) -> Path:
    config = {
        "architectures": ["MiMoForCausalLM"], "model_type": "mimo", "hidden_size": 7168,
        "num_hidden_layers": 61, "vocab_size": 163840,
    }  # fmt: skip
    write_json(root / "mimo" / "config.json", config)
    return root / "mimo"


@pytest.mark.parametrize(
    ("release", "level", "says"),
    [
        ("0.15.1", PROBLEM, "allow-list lets the drafter through"),
        ("0.22.0", PROBLEM, "gets one tensor back"),
        ("0.34.0", PROBLEM, "gets one tensor back"),
        ("0.35.0", WARNING, "was not read"),
    ],
)
def test_doctor_names_a_target_that_claims_eagle3_and_captures_nothing(
    tmp_path: Path, release: str, level: str, says: str
) -> None:
    drafter = specforge_drafter(tmp_path, eagle_aux_hidden_state_layer_ids=[3, 31, 59])
    code, report = doctor_json(
        "--model", str(_mimo_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", release
    )
    found = by_check(report, "capture")
    assert [lvl for lvl, _ in found] == [level], found
    assert says in found[0][1] and "MiMoModel.forward" in found[0][1], found
    assert code == (1 if level == PROBLEM else 0), report


@pytest.mark.parametrize(
    ("architectures", "model_type", "found"),
    [
        (["MiMoForCausalLM"], "qwen2", True),  # the class vLLM builds decides, not model_type
        (["Qwen2ForCausalLM"], "mimo", False),
    ],
)
def test_the_capture_check_goes_by_the_class_vllm_builds(
    tmp_path: Path, architectures: list[str], model_type: str, found: bool
) -> None:
    target = _mimo_target(tmp_path)
    config = json.loads((target / "config.json").read_text())
    config.update(architectures=architectures, model_type=model_type)
    write_json(target / "config.json", config)
    drafter = specforge_drafter(tmp_path, eagle_aux_hidden_state_layer_ids=[3, 31, 59])
    _, report = doctor_json(
        "--model", str(target), "--drafter", str(drafter), "--vllm-version", "0.22.0"
    )
    assert bool(by_check(report, "capture")) is found, report


def test_a_target_whose_class_captures_gets_no_capture_finding(tmp_path: Path) -> None:
    from ..models.model_files import kimi_target

    drafter = specforge_drafter(tmp_path, eagle_aux_hidden_state_layer_ids=[3, 31, 59])
    _, report = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.15.1"
    )
    assert by_check(report, "capture") == []
