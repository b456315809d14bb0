"""A hybrid target's KV page against its drafter's (doctor/kv_page.py): the rule is vLLM's own
function's verdict, the releases it holds for are read from their wheels, and doctor says it."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_patcher.doctor import OK, PROBLEM, WARNING
from vllm_patcher.doctor.kv_page import (
    HYBRID_ARCHITECTURES,
    PAD_ANY_FROM,
    PAD_ATTENTION_FROM,
    PAD_MAMBA_FROM,
    READ_UNTIL,
    UNIFY_FROM,
    failure,
    fits_from,
)
from vllm_patcher.wheels import sources

from ..conftest import run_cli, venv_site
from ..models.model_files import kimi_target, specforge_drafter, write_json
from .reports import by_check, doctor_json
from .test_drafter_flags import RELEASES

PROBE = Path(__file__).with_name("unify_probe.py")
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
# (target KV heads, head dim, drafter KV heads, head dim): equal, dividing, a multiple (the
# GPU proof's 2026-12-03 failure), neither way, smaller but not dividing
CASES = [(1, 64, 1, 64), (2, 256, 4, 128), (2, 256, 1, 64), (1, 64, 2, 64), (8, 128, 16, 128),
         (2, 128, 3, 64), (2, 96, 1, 128)]  # fmt: skip


def test_the_rule_is_vllm_0_15_1_s_own_unify_kv_cache_spec_page_size(vllm_python: Path) -> None:
    proc = subprocess.run(
        [str(vllm_python), str(PROBE), json.dumps(CASES)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    found = [failure(tk * td, dk * dd, Version("0.15.1")) for tk, td, dk, dd in CASES]
    ours = ["ok" if f is None else f[1] for f in found]
    assert ours == real
    assert {"ok", "AssertionError", "NotImplementedError"} == set(real)  # every branch is held


def test_the_release_a_fix_names_is_the_first_from_which_the_pair_always_fits() -> None:
    read = [Version(v) for v in RELEASES if Version(v) <= READ_UNTIL]
    for t in (64, 128, 256, 512):
        for d in (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024):
            fitting = [r for r in read if failure(t, d, r) is None]
            first = next(r for r in read if all(x in fitting for x in read if x >= r))
            assert fits_from(t, d) == first, (t, d)


def _hybrid_classes(models: Path) -> set[str]:
    """The causal-LM and VL classes of vLLM's model files that reach IsHybrid through their
    bases (by name, across files)."""
    bases: dict[str, set[str]] = {}
    for path in models.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, ast.Name | ast.Attribute)
                }
                bases.setdefault(node.name, set()).update(names)

    def hybrid(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "IsHybrid":
            return True
        return name not in seen and any(hybrid(b, seen | {name}) for b in bases.get(name, ()))

    ends = ("ForCausalLM", "ForConditionalGeneration")
    return {c for c in bases if c.endswith(ends) and hybrid(c)}


def test_every_hybrid_class_of_vllm_0_15_1_is_known(vllm_python: Path) -> None:
    found = _hybrid_classes(venv_site(vllm_python) / "vllm" / "model_executor" / "models")
    assert {"NemotronHForCausalLM", "Qwen3NextForCausalLM"} <= found  # the reader is not blind
    assert found - HYBRID_ARCHITECTURES == set()


@pytest.fixture(scope="module")
def kv_utils() -> dict[str, str]:
    return {
        v: (sources.fetch_release(v, [KV_UTILS]) / KV_UTILS).read_text(encoding="utf-8")
        for v in RELEASES
    }


def _unify(text: str) -> str:
    """The body of unify_kv_cache_spec_page_size, or '' where the release has none."""
    start = text.find("def unify_kv_cache_spec_page_size(")
    if start < 0:
        return ""
    end = text.find("\ndef ", start + 1)
    return text[start:end]


def test_each_release_s_pages_follow_the_rule_s_regime(kv_utils: dict[str, str]) -> None:
    for version, text in kv_utils.items():
        release, body = Version(version), _unify(text)
        if release < UNIFY_FROM:  # pages must already be one size, or get_kv_cache_groups gives up
            assert body == "" and "is_kv_cache_page_size_uniform(" in text, version
            assert "\n    raise NotImplementedError\n" in text, version
            continue
        assert bool(body) is (release <= READ_UNTIL), version
        if not body:
            continue
        # a smaller page scales its block size, which a Mamba page's size does not follow
        assert "layer_spec.block_size * ratio" in body, version
        assert "assert new_spec.page_size_bytes == max_page_size" in body, version
        by_backend = "indexes_kv_by_block_stride" in body
        assert by_backend is (PAD_ATTENTION_FROM <= release < PAD_ANY_FROM), version
        pads_any = "not isinstance(\n                layer_spec, MLAAttentionSpec" in body
        assert pads_any is (release >= PAD_ANY_FROM), version
        pads_mamba = "isinstance(layer_spec, MambaSpec)" in body
        assert pads_mamba is (release >= PAD_MAMBA_FROM), version


def _nemotron_h(root: Path, kv: int, dim: int) -> Path:
    config = {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "hidden_size": 4096, "num_hidden_layers": 52, "vocab_size": 131072,
        "num_attention_heads": 32, "num_key_value_heads": kv, "head_dim": dim,
        "hybrid_override_pattern": "M-M-M-M*-" * 5 + "M-M-M-M-M-M-M",
    }  # fmt: skip
    write_json(root / "target" / "config.json", config)
    return root / "target"


def _drafter(root: Path, kv: int, dim: int) -> Path:
    return specforge_drafter(
        root, vocab=131072, hidden_size=4096, num_attention_heads=32, num_key_value_heads=kv,
        head_dim=dim, eagle_aux_hidden_state_layer_ids=[1, 25, 49],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("release", "target", "drafter", "tensor", "level", "says"),
    [
        ("0.21.0", (1, 64), (2, 64), None, PROBLEM, "AssertionError"),  # the GPU proof's pair
        ("0.21.0", (2, 256), (8, 128), None, PROBLEM, "AssertionError"),
        ("0.21.0", (2, 256), (8, 128), "8", OK, "over 8 GPUs, 1 a GPU, x 256 = 256"),
        ("0.21.0", (8, 128), (4, 128), None, OK, "fit"),
        ("0.21.0", (8, 128), (16, 128), "3", None, None),  # vLLM refuses 3 GPUs itself
        ("0.11.0", (8, 128), (4, 128), None, PROBLEM, "NotImplementedError"),  # equal before 0.12
        ("0.11.0", (8, 128), (8, 128), None, OK, "fit"),
        ("0.23.0", (2, 128), (3, 64), None, PROBLEM, "NotImplementedError"),
        ("0.24.0", (2, 128), (3, 64), None, WARNING, "backend"),  # padded, by backend
        ("0.25.1", (1, 64), (2, 64), None, PROBLEM, "AssertionError"),
        ("0.26.0", (1, 64), (2, 64), None, OK, "fit"),  # the Mamba page padded from 0.26.0
        ("0.28.0", (2, 64), (3, 64), None, WARNING, "backend"),  # the target's page padded
        ("0.29.0", (2, 64), (3, 64), None, OK, "fit"),  # any attention page padded
        ("0.34.0", (1, 64), (3, 64), None, None, None),  # not read the same way: nothing said
        ("0.10.2", (8, 128), (4, 128), None, None, None),  # before the releases read
        ("0.26.0", (8, 128), (12, 128), None, WARNING, "pad the target's page"),
    ],
)
def test_doctor_names_a_drafter_page_a_hybrid_target_cannot_hold(
    tmp_path: Path,
    release: str,
    target: tuple[int, int],
    drafter: tuple[int, int],
    tensor: str | None,
    level: str | None,
    says: str | None,
) -> None:
    tp = ["--tensor-parallel-size", tensor] if tensor else []
    code, report = doctor_json(
        "--model", str(_nemotron_h(tmp_path, *target)), "--drafter",
        str(_drafter(tmp_path, *drafter)), "--vllm-version", release, *tp,
    )  # fmt: skip
    found = by_check(report, "kv-page")
    if level is None:
        assert found == [], found
        return
    assert [lvl for lvl, _ in found] == [level], found
    assert says in found[0][1] and "NemotronHForCausalLM" in found[0][1], found
    if level == PROBLEM:
        assert code == 1, report


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"num_key_value_heads": "8"}, None),  # present but not a whole number: not judged
        ({"num_key_value_heads": 0}, None),
        ({"head_dim": 128.0}, None),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, None),  # MLA: one latent head a page
        ({"architectures": ["Zamba2ForCausalLM"]}, None),  # its head size is read another way
        # vLLM's other spellings, each giving another verdict than the fallback would
        ({"num_key_value_heads": None, "num_kv_heads": 4}, PROBLEM),  # else 32 heads: ok
        ({"head_dim": None, "hidden_size_per_head": 256}, OK),  # else 4096 / 32 = 128: problem
    ],
)
def test_a_target_config_is_read_as_vllm_reads_it_or_not_judged(
    tmp_path: Path, change: dict[str, object], says: str | None
) -> None:
    target = _nemotron_h(tmp_path, 8, 128)
    config = json.loads((target / "config.json").read_text())
    config.update(change)
    write_json(target / "config.json", {k: v for k, v in config.items() if v is not None})
    _, report = doctor_json(
        "--model", str(target), "--drafter", str(_drafter(tmp_path, 16, 128)),
        "--vllm-version", "0.21.0",
    )  # fmt: skip
    assert [lvl for lvl, _ in by_check(report, "kv-page")] == ([says] if says else []), report


def test_a_drafter_s_attention_is_read_at_its_top_level(tmp_path: Path) -> None:
    """vLLM's EAGLE-3 head reads its config's top level, not a text_config in it."""
    drafter = _drafter(tmp_path, 16, 128)
    config = json.loads((drafter / "config.json").read_text())
    config["text_config"] = {"num_key_value_heads": 8, "head_dim": 128}
    write_json(drafter / "config.json", config)
    _, report = doctor_json(
        "--model", str(_nemotron_h(tmp_path, 8, 128)), "--drafter", str(drafter),
        "--vllm-version", "0.21.0",
    )  # fmt: skip
    assert [lvl for lvl, _ in by_check(report, "kv-page")] == [PROBLEM], report


def test_a_target_that_is_not_hybrid_gets_no_kv_page_finding(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, num_key_value_heads=64, head_dim=999,
                                eagle_aux_hidden_state_layer_ids=[3, 31, 59])  # fmt: skip
    _, report = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.21.0"
    )
    assert by_check(report, "kv-page") == []


def test_serve_args_judges_the_page_at_the_server_s_tensor_parallel_size(tmp_path: Path) -> None:
    """Two KV heads of 256 against eight of 128: one GPU cannot fit them, eight GPUs hold one
    head each (256 and 128), which fits; serve-args refuses the first and prints the second."""
    pair = ["--model", str(_nemotron_h(tmp_path, 2, 256)), "--drafter",
            str(_drafter(tmp_path, 8, 128)), "--vllm-version", "0.21.0"]  # fmt: skip
    refused = run_cli("serve-args", *pair)
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert "kv-page" in refused.stderr and "AssertionError" in refused.stderr, refused.stderr
    served = run_cli("serve-args", *pair, "--tensor-parallel-size", "8")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["method"] == "eagle3"
