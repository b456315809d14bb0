"""Integration on a real vLLM 0.15.1 venv: the tool inside that venv, and from outside via --python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_patcher.patching.verify import Check

from ..conftest import (
    CATALOGUE,
    GRANITE_CHECKS,
    MINIMAX_CHECKS,
    methods_on,
    pip_reinstall_vllm,
    revert_force_keeps,
    run_cli,
    states_on,
    touched_match_record,
    venv_site,
)

PATCHES = CATALOGUE.names


def modes(vllm_python: Path) -> dict[str, tuple[str | None, list[str]]]:
    return {
        "inside": (str(vllm_python), []),  # vllm-patcher installed in the vLLM venv itself
        "--python": (sys.executable, ["--python", str(vllm_python)]),  # from the dev venv
    }


@pytest.mark.parametrize("mode", ["inside", "--python"])
def test_apply_status_verify_revert(vllm_python: Path, mode: str) -> None:
    interpreter, where = modes(vllm_python)[mode]
    site = venv_site(vllm_python)

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_cli(*where, *args, python=interpreter, check=check)

    st = json.loads(cli("--json", "status").stdout)
    assert st["vllm_version"] == "0.15.1"
    assert Path(st["location"]) == site
    assert [(p["name"], p["state"], p["method"]) for p in st["patches"]] == list(
        zip(PATCHES, states_on("0.15.1", "pending"), methods_on("0.15.1"), strict=True)
    )

    applied = json.loads(cli("--json", "apply").stdout)
    assert [p["state"] for p in applied["patches"]] == states_on("0.15.1", "applied")
    assert not any(touched_match_record(site).values())
    assert json.loads(cli("--json", "apply").stdout)["changed"] == []

    verify = cli("--json", "verify", check=False)
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, [c for c in report["checks"] if not c["ok"]]
    assert report["tiers"] == dict.fromkeys(("state", "compile", "import", "behaviour"), "passed")
    names = {c["name"] for c in report["checks"]}
    assert "supports-eagle3: supports_eagle3(KimiK25ForConditionalGeneration)" in names
    assert "eagle3-whitelist: SpeculativeConfig eagle3 rejects gpt2 (not on the list)" in names
    assert not any(c["skipped"] for c in report["checks"])  # 0.15.1 ships Kimi-K2.5
    assert set(MINIMAX_CHECKS) <= names  # and MiniMax-M2: its checks ran and passed
    assert set(GRANITE_CHECKS) <= names  # and Granite's

    cli("revert")
    assert all(touched_match_record(site).values())
    assert not (site / ".vllm-patcher" / "state.json").exists()
    assert "nothing applied" in cli("revert").stdout


def test_verify_fails_before_apply_and_names_the_cause(
    vllm_python: Path, pristine_probe: list[Check]
) -> None:
    proc = run_cli("--python", str(vllm_python), "--json", "verify")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["tiers"]["state"] == "failed"
    assert report["fix"] == f"vllm-patcher --python {vllm_python} apply"
    assert report["tiers"]["import"] == report["tiers"]["behaviour"] == "not-run"
    # verify stops there; the checks it spared, run anyway, fail on what is missing
    failed = {c.name: c.detail for c in pristine_probe if not c.ok}
    accept = "eagle3-whitelist: SpeculativeConfig eagle3 accepts deepseek_v3"
    assert accept in failed
    assert "only supported for" in failed[accept]
    assert "supports-eagle3: forward with aux layers returns (hidden, aux)" in failed
    assert set(MINIMAX_CHECKS) <= set(failed), set(MINIMAX_CHECKS) - set(failed)
    assert set(GRANITE_CHECKS) <= set(failed), set(GRANITE_CHECKS) - set(failed)


PROBE = (
    "from vllm.model_executor.models.interfaces import supports_eagle3\n"
    "from vllm.model_executor.models.deepseek_v2 import DeepseekV3ForCausalLM\n"
    "print(supports_eagle3(DeepseekV3ForCausalLM))\n"
)


def fresh_import(vllm_python: Path) -> str:
    # bytecode writing on, so a stale .pyc would be used by the next import if one were left
    out = subprocess.run(
        [str(vllm_python), "-c", PROBE],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_no_stale_bytecode_after_apply_and_revert(vllm_python: Path) -> None:
    assert fresh_import(vllm_python) == "False"
    run_cli("--python", str(vllm_python), "apply", check=True)
    assert fresh_import(vllm_python) == "True"
    run_cli("--python", str(vllm_python), "revert", check=True)
    assert fresh_import(vllm_python) == "False"


BREAKAGES = {
    # the seed's mistake: a trailing comma in an unparenthesised import
    "trailing-comma": (
        "vllm/model_executor/models/deepseek_v2.py",
        "SupportsPP, SupportsEagle3\n",
        "SupportsPP, SupportsEagle3,\n",
        "compile",
        "vllm/model_executor/models/deepseek_v2.py",
    ),
    "no-SupportsEagle3-base": (
        "vllm/model_executor/models/deepseek_v2.py",
        "SupportsLoRA, SupportsEagle, SupportsEagle3\n",
        "SupportsLoRA, SupportsEagle\n",
        "behaviour",
        "supports-eagle3: supports_eagle3(DeepseekV3ForCausalLM)",
    ),
    "aux-capture-disabled": (
        "vllm/model_executor/models/deepseek_v2.py",
        "if idx in self.aux_hidden_state_layers:",
        "if idx in ():",
        "behaviour",
        "supports-eagle3: forward with aux layers returns (hidden, aux)",
    ),
    "kimi-branch-broken": (
        "vllm/v1/spec_decode/eagle.py",
        "target_model.config.media_placeholder_token_id",
        "target_model.config.image_token_index",
        "behaviour",
        "kimi-k25-image-token: EAGLE proposer reads Kimi-K2.5's image token from "
        "media_placeholder_token_id",
    ),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_verify_catches_each_breakage_in_the_right_tier(vllm_python: Path, breakage: str) -> None:
    rel, old, new, tier, check_name = BREAKAGES[breakage]
    where = ["--python", str(vllm_python)]
    site = venv_site(vllm_python)
    run_cli(*where, "apply", check=True)
    path = site / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in the patched {rel}"
    path.write_text(text.replace(old, new))

    proc = run_cli(*where, "--json", "verify")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["tiers"][tier] == "failed", report["tiers"]
    failed = {c["name"]: c["detail"] for c in report["checks"] if not c["ok"] and c["tier"] == tier}
    if tier == "compile":
        assert report["tiers"]["import"] == "not-run"
        detail = failed[rel]
        line = next(
            i
            for i, t in enumerate(path.read_text().splitlines(), 1)
            if t.endswith("SupportsEagle3,")
        )
        assert f"{path}:{line}:" in detail
    else:
        assert check_name in failed, failed
        assert failed[check_name]
    # the edit is ours to undo: revert --force keeps it aside and gives back the installer's
    # bytes, with no state left (apply and verify green from there: test_apply_status_verify_revert)
    revert_force_keeps(vllm_python, site, rel)


def test_a_real_pip_reinstall_after_apply_shows_drift_and_apply_heals_it(vllm_python: Path) -> None:
    where = ["--python", str(vllm_python)]
    site = venv_site(vllm_python)
    run_cli(*where, "apply", check=True)
    pip_reinstall_vllm(vllm_python)
    assert all(touched_match_record(site).values())
    st = json.loads(run_cli(*where, "--json", "status", check=True).stdout)
    assert [p["state"] for p in st["patches"]] == states_on("0.15.1", "drifted")
    run_cli(*where, "apply", check=True)
    st = json.loads(run_cli(*where, "--json", "status", check=True).stdout)
    assert [p["state"] for p in st["patches"]] == states_on("0.15.1", "applied")
    run_cli(*where, "revert", check=True)
    assert all(touched_match_record(site).values())
