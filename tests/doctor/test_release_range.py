"""The releases vllm-patcher can patch, as doctor judges them: read from the patch folders."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_patcher.doctor import PROBLEM

from ..conftest import assert_refused, copy_builtins, run_cli
from ..models.model_files import (
    DEEPSEEK_VOCAB,
    KEY,
    KIMI_VOCAB,
    deepseek_target,
    drafter_weights,
    kimi_target,
    minimax_drafter,
    minimax_target,
    specforge_drafter,
)
from .reports import by_check, check, doctor_json

# --- releases vllm-patcher cannot patch ------------------------------------------------------------


def consistent_deepseek_pair(root: Path) -> tuple[str, ...]:
    """A DeepSeek-V3 target and a drafter that fits it on every release from 0.11.0."""
    drafter = specforge_drafter(root, vocab=DEEPSEEK_VOCAB, weights=drafter_weights())
    return ("--model", str(deepseek_target(root)), "--drafter", str(drafter))


@pytest.mark.parametrize("version", ["0.9.0", "0.10.2", "0.10.1.1", "0.10.2+cpu"])
def test_a_release_before_0_11_0_is_a_problem(tmp_path: Path, version: str) -> None:
    proc = run_cli("doctor", *consistent_deepseek_pair(tmp_path), "--vllm-version", version)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.split()[:1] == ["problem"]]
    assert lines[index].split()[1] == "vllm-release"
    assert f"vLLM {version} is older than 0.11.0" in lines[index]
    assert "vllm-patcher cannot patch it" in lines[index]
    assert "fix: upgrade vLLM to 0.11.0 or newer" in lines[index + 1]
    assert lines[-1] == "doctor: 1 problem, 0 warnings"


def test_a_release_before_0_11_0_is_a_problem_in_json(tmp_path: Path) -> None:
    code, data = doctor_json(*consistent_deepseek_pair(tmp_path), "--vllm-version", "0.9.0")
    assert code == 1 and data["ok"] is False and data["problems"] == 1
    (problem,) = [f for f in data["findings"] if f["level"] == PROBLEM]
    assert problem["check"] == "vllm-release"
    assert "cannot patch" in problem["message"]
    # read from the patch folders: both DeepSeek patches start at 0.11.0 and are upstream at 0.18.0
    assert "it patches 0.11.0 up to (not including) 0.18.0" in problem["message"]
    assert "eagle3-whitelist >=0.11.0" in problem["message"]
    assert problem["fix"].startswith("upgrade vLLM to 0.11.0 or newer")


@pytest.mark.parametrize("version", ["0.11.0", "0.11.0rc2", "0.17.1", "0.18.0", "0.22.0", "1.0.0"])
def test_releases_from_0_11_0_are_not_a_release_problem(tmp_path: Path, version: str) -> None:
    # 0.11.0-0.17.x are patchable (apply, too, judges a pre-release by its base release);
    # from 0.18.0 upstream has the changes
    code, data = doctor_json(*consistent_deepseek_pair(tmp_path), "--vllm-version", version)
    assert code == 0, data["findings"]
    assert by_check(data, "vllm-release") == []


def test_old_release_and_kimi_target_are_both_named(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), eagle_aux_hidden_state_layer_ids=[3, 31, 59]
    )
    report = check(kimi_target(tmp_path), drafter, "0.10.2")
    assert [f.check for f in report.problems][:2] == ["vllm-release", "target"]


def test_without_vllm_or_vllm_version_it_refuses_like_other_commands(tmp_path: Path) -> None:
    # the development venv has no vLLM
    proc = run_cli(
        "doctor",
        "--model",
        str(kimi_target(tmp_path)),
        "--drafter",
        str(specforge_drafter(tmp_path)),
    )
    assert_refused(proc, 3, "no vLLM installed", "--vllm-version")


# --- releases: read from the patch folders ------------------------------------------------------


@pytest.mark.parametrize("version", ["0.20.0", "0.25.0", "1.0.0"])
def test_minimax_m2_at_or_past_fixed_in_is_upstream_not_a_release_problem(
    tmp_path: Path, version: str
) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), version)
    assert report.ok and by_check(report, "vllm-release") == []


def test_minimax_m2_on_0_11_0_is_outside_what_apply_patches(tmp_path: Path) -> None:
    report = check(minimax_target(tmp_path), minimax_drafter(tmp_path), "0.11.0")
    ((level, message),) = by_check(report, "vllm-release")
    assert level == PROBLEM and "vLLM 0.11.0 is older than 0.11.1" in message


def test_the_supported_range_comes_from_the_patch_folders(tmp_path: Path) -> None:
    pins, env = copy_builtins(tmp_path / "copy")
    toml = pins / "supports-eagle3" / "patch.toml"
    toml.write_text(toml.read_text().replace('releases = ">=0.11.0"', 'releases = ">=0.12.0"'))
    args = (*consistent_deepseek_pair(tmp_path), "--vllm-version", "0.11.0")
    assert run_cli("doctor", *args).returncode == 0
    proc = run_cli("doctor", *args, env=env)
    assert proc.returncode == 1, proc.stdout
    assert "vLLM 0.11.0 is older than 0.12.0" in proc.stdout
    assert "supports-eagle3 >=0.12.0" in proc.stdout


# --- one run, one release to upgrade to -----------------------------------------------------------

UPGRADE_TO = re.compile(r"(\d+\.\d+\.\d+) or newer")


def upgrades_named(data: dict[str, Any]) -> dict[str, set[str]]:
    """Each check's fix, by the releases it tells the user to move to."""
    named: dict[str, set[str]] = {}
    for f in data["findings"]:
        for release in UPGRADE_TO.findall(f["fix"] or ""):
            named.setdefault(f["check"], set()).add(release)
    return named


@pytest.mark.parametrize(
    ("target", "vocab", "needed"),
    [
        # the release check alone asks for 0.11.0; the SpecForge drafter needs the top-level key,
        # which 0.11.1 reads first
        (deepseek_target, DEEPSEEK_VOCAB, "0.11.1"),
        # Kimi-K2.5's model file arrives in 0.15.0
        (kimi_target, KIMI_VOCAB, "0.15.0"),
    ],
)
def test_every_upgrade_in_one_run_names_the_release_the_run_needs(
    tmp_path: Path, target: Callable[[Path], Path], vocab: int, needed: str
) -> None:
    drafter = specforge_drafter(
        tmp_path, vocab=vocab, nested=[2, 30, 58], weights=drafter_weights()
    )
    args = ("--model", str(target(tmp_path)), "--drafter", str(drafter), "--vllm-version", "0.10.2")
    code, data = doctor_json(*args)
    assert code == 1
    named = upgrades_named(data)
    assert {"vllm-release", "aux-layers"} <= set(named), data["findings"]
    assert set().union(*named.values()) == {needed}, named
    # the text says the same
    out = run_cli("doctor", *args).stdout
    assert set(UPGRADE_TO.findall(out)) == {needed}, out
    assert f"fix: upgrade vLLM to {needed} or newer" in out


def test_a_flag_read_from_a_later_release_raises_the_release_of_every_upgrade(
    tmp_path: Path,
) -> None:
    # 0.14.1: the Kimi-K2.5 model needs 0.15.0, norm_before_fc at the top level 0.18.0
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), norm_before_fc=True, **{KEY: [3, 31, 59]}
    )
    report = check(kimi_target(tmp_path), drafter, "0.14.1")
    named = upgrades_named(report.to_dict())
    assert set(named) == {"target", "flags"}, report.findings
    assert set().union(*named.values()) == {"0.18.0"}, named


def test_a_lone_upgrade_names_its_own_release(tmp_path: Path) -> None:
    drafter = specforge_drafter(tmp_path, weights=drafter_weights(), **{KEY: [3, 31, 59]})
    named = upgrades_named(check(kimi_target(tmp_path), drafter, "0.14.1").to_dict())
    assert named == {"target": {"0.15.0"}}


# --- one target, one finding ------------------------------------------------------------------------


def test_a_target_the_release_cannot_load_has_one_target_finding(tmp_path: Path) -> None:
    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(), eagle_aux_hidden_state_layer_ids=[3, 31, 59]
    )
    args = ("--model", str(kimi_target(tmp_path)), "--drafter", str(drafter))
    code, data = doctor_json(*args, "--vllm-version", "0.14.1")
    assert code == 1
    ((level, message),) = by_check(data, "target")
    assert level == PROBLEM and "cannot load a Kimi-K2.5 target" in message
    lines = run_cli("doctor", *args, "--vllm-version", "0.14.1").stdout.splitlines()
    assert [line.split()[:2] for line in lines if line.split()[1:2] == ["target"]] == [
        ["problem", "target"]
    ]
    # on a release that loads it, the one target line is the ok one
    code, data = doctor_json(*args, "--vllm-version", "0.15.1")
    assert code == 0
    assert [level for level, _ in by_check(data, "target")] == ["ok"]
