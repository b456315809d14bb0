"""vllm_patcher/patching/status.py: what the state says is true. `applied` means the bytes the
patches given now produce (else `outdated`, and apply brings the new version), a capture never
makes a patch the default apply refuses, and the method shown is the one apply uses. Real 0.15.1
trees, the real command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from vllm_patcher.cli import outcomes
from vllm_patcher.cluster import nodes as cluster
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    FIRST_FIVE,
    REPO,
    assert_refused,
    copy_builtins,
    run_cli,
    scratch_tree,
    snapshot,
    states_on,
    touched_match_record,
)
from .sites import FILES, LOAD, SPEC

MINIMAX = "vllm/model_executor/models/minimax_m2.py"
LIST_0151 = '"kimi_k25"]'  # the allow-list's end as the built-ins leave it
PRISTINE_LIST = '"minicpm", "gpt_oss"]'  # the allow-list's end in the pristine 0.15.1 file
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())
)


@pytest.fixture(scope="module")
def pristine_0151() -> Path:
    """The shared cache's pristine 0.15.1 tree holding FILES (read only), fetched on first use."""
    return sources.fetch_release("0.15.1", FILES)


def _edit(site: Path, rel: str, old: str, new: str) -> None:
    path = site / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


def _status(site: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = run_cli("--target", str(site), *extra, "--json", "status", env=env)
    answer: dict[str, Any] = json.loads(proc.stdout)
    VALIDATOR.validate(answer)
    return answer


def _states(site: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, str]:
    return {p["name"]: p["state"] for p in _status(site, *extra, env=env)["patches"]}


def _recaptured(tree_copy, tmp_path: Path, also_load: bool = False) -> tuple[Path, Path, Path]:  # type: ignore[no-untyped-def]
    """The issue's reproduction: my-fix captured on T over the built-ins; T copied to T2 before
    that edit, the same line edited differently there (with ``also_load``, config/load.py too)
    and my-fix captured again into the same folder, as a `git pull` of the team's patches
    would bring it."""
    t = tree_copy("0.15.1", FILES)
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(t), "apply", check=True)
    t2 = tmp_path / "t2"
    shutil.copytree(t, t2)
    _edit(t, SPEC, LIST_0151, '"kimi_k25", "model_a"]')
    run_cli("--target", str(t), "--patches", str(mine), "capture", "my-fix", check=True)
    _edit(t2, SPEC, LIST_0151, '"kimi_k25", "model_b"]')
    if also_load:
        _edit(t2, LOAD, "\n", "\n# model_b needs this too\n")
    run_cli("--target", str(t2), "--patches", str(mine), "capture", "my-fix", check=True)
    return t, t2, mine


def test_a_recaptured_patch_is_outdated_not_applied_on_old_bytes(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t, t2, mine = _recaptured(tree_copy, tmp_path)
    old = (t / SPEC).read_bytes()
    check = run_cli("--target", str(t), "--patches", str(mine), "status", "--check")
    assert check.returncode == 1, check.stdout
    line = next(x for x in check.stdout.splitlines() if x.strip().startswith("my-fix"))
    assert "outdated" in line, check.stdout
    states = _states(t, "--patches", str(mine))
    assert states["my-fix"] == "outdated", states
    # verify's state tier fails it and names apply as the fix
    out = run_cli("--target", str(t), "--patches", str(mine), "--json", "verify")
    report = json.loads(out.stdout)
    VALIDATOR.validate(report)
    assert out.returncode == 1 and report["tiers"]["state"] == "failed", report
    assert report["fix"] and report["fix"].endswith("apply"), report["fix"]
    failed = {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}
    assert failed["my-fix"].startswith("outdated"), failed

    # apply brings the new version (replayed from the pristine copy), and status agrees
    applied = run_cli("--target", str(t), "--patches", str(mine), "--json", "apply", check=True)
    assert json.loads(applied.stdout)["changed"] == [SPEC]
    assert (t / SPEC).read_bytes() == (t2 / SPEC).read_bytes() != old
    assert set(_states(t, "--patches", str(mine)).values()) == set(states_on("0.15.1", "applied"))
    run_cli("--target", str(t), "--patches", str(mine), "status", "--check", check=True)
    # the fingerprint now equals the node that captured the new version
    assert (
        _status(t, "--patches", str(mine))["fingerprint"]
        == _status(t2, "--patches", str(mine))["fingerprint"]
    )
    run_cli("--target", str(t), "--patches", str(mine), "revert", check=True)
    assert all(touched_match_record(t).values())


def test_an_outdated_node_is_not_ready_in_the_cluster_verdict(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two nodes with the old bytes agree on one fingerprint; the verdict still fails them."""
    t, _, mine = _recaptured(tree_copy, tmp_path)
    status = _status(t, "--patches", str(mine))
    nodes = [
        cluster._node_result(
            {
                "node_id": f"node{i}",
                "host": f"h{i}",
                "outcome": "answered",
                "answer": {"status": status},
            }
        )
        for i in range(2)
    ]
    report = cluster.ClusterReport("status", "local", "2.0", nodes)
    cluster.judge(report)
    assert len(report.fingerprints) == 1
    lost = any(n.outcome == cluster.LOST for n in report.nodes)
    assert not report.ok and not lost and outcomes.cluster(report.ok, lost) == 1
    assert all(any("my-fix outdated" in p for p in n.problems) for n in nodes), report.problems


def test_apply_of_an_outdated_series_is_all_or_nothing(
    tree_copy, pristine_0151: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The new version of my-fix also changes config/load.py: ENOSPC at every write of the
    upgrading apply in turn gives exit 6 and every file as it was; then it lands whole."""
    t, t2, mine = _recaptured(tree_copy, tmp_path, also_load=True)
    before = snapshot(t)
    index = 0
    while True:
        index += 1
        trial = tmp_path / f"trial-{index}"
        shutil.copytree(t, trial)
        proc = run_cli(
            "--target", str(trial), "--patches", str(mine), "apply",
            env={"VLLM_PATCHER_FAULT": f"enospc@write#{index}"},
        )  # fmt: skip
        if proc.returncode == 0:
            break
        assert_refused(proc, 6, "no space left on device")
        assert snapshot(trial) == before, f"write {index}: the tree changed"
        assert _states(trial, "--patches", str(mine))["my-fix"] == "outdated"
        shutil.rmtree(trial)
    assert index > 4, index  # the journal, the new file's pristine copy, two files, the journal
    for rel in (SPEC, LOAD):
        assert (trial / rel).read_bytes() == (t2 / rel).read_bytes()
    assert set(_states(trial, "--patches", str(mine)).values()) == set(
        states_on("0.15.1", "applied")
    )
    run_cli("--target", str(trial), "--patches", str(mine), "revert", check=True)
    assert all(touched_match_record(trial).values())
    assert (trial / LOAD).read_bytes() == (pristine_0151 / LOAD).read_bytes()


def test_a_patch_whose_new_version_no_longer_changes_a_file_is_outdated_until_apply_restores_it(
    tree_copy,
    pristine_0151: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """my-fix changed the allow-list and config/load.py on T; recaptured on T2 (a copy from
    before) with the same allow-list edit alone. T's load.py now holds what no patch makes."""
    t = tree_copy("0.15.1", FILES)
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(t), "apply", check=True)
    t2 = tmp_path / "t2"
    shutil.copytree(t, t2)
    for site in (t, t2):
        _edit(site, SPEC, LIST_0151, '"kimi_k25", "model_a"]')
    _edit(t, LOAD, "\n", "\n# model_a needs this too\n")
    run_cli("--target", str(t), "--patches", str(mine), "capture", "my-fix", check=True)
    run_cli("--target", str(t2), "--patches", str(mine), "capture", "my-fix", check=True)
    st = _status(t, "--patches", str(mine))
    assert {p["name"]: p["state"] for p in st["patches"]}["my-fix"] == "outdated"
    assert {f["path"]: f["state"] for f in st["files"] if f["patch"] == "my-fix"} == {
        SPEC: "applied",
        LOAD: "outdated",
    }
    assert run_cli("--target", str(t), "--patches", str(mine), "status", "--check").returncode == 1
    spec = (t / SPEC).read_bytes()
    run_cli("--target", str(t), "--patches", str(mine), "apply", check=True)
    assert (t / LOAD).read_bytes() == (pristine_0151 / LOAD).read_bytes()
    assert (t / SPEC).read_bytes() == spec
    assert set(_states(t, "--patches", str(mine)).values()) == set(states_on("0.15.1", "applied"))
    assert not (t / ".vllm-patcher" / "pristine" / LOAD).exists()
    state = json.loads((t / ".vllm-patcher" / "state.json").read_text())
    assert LOAD not in state["files"] and state["patches"]["my-fix"]["files"] == [SPEC]
    assert (
        _status(t, "--patches", str(mine))["fingerprint"]
        == _status(t2, "--patches", str(mine))["fingerprint"]
    )
    run_cli("--target", str(t), "--patches", str(mine), "revert", check=True)
    assert all(touched_match_record(t).values())


def test_a_changed_builtin_pin_under_an_applied_tree_is_outdated_and_apply_upgrades_it(
    tree_copy,
    pristine_0151: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A tool upgrade re-pins eagle3-whitelist for 0.15.1 (and eagle3-minimax-m2 and
    eagle3-granite, which stack on it in the allow-list file)."""
    pins, env = copy_builtins(tmp_path, only=FIRST_FIVE)
    site = tree_copy("0.15.1", FILES)
    run_cli("--target", str(site), "apply", env=env, check=True)
    pristine = (pristine_0151 / SPEC).read_text()
    whitelist = (pins / "eagle3-whitelist" / "vllm-0.15.1" / "patch.diff").read_text()
    from vllm_patcher.catalogue.writer import write_pin
    from vllm_patcher.diffs import pinned

    def spec_diff(name: str) -> str:
        pin = CATALOGUE.get(name).pin("0.15.1")  # type: ignore[union-attr]
        assert pin is not None
        return pin.per_file[SPEC]

    old = pinned.apply_exact(pristine, whitelist, "whitelist")
    new_whitelist = old.replace('"kimi_k25"]', '"kimi_k25", "deepseek_mtp"]')
    new_minimax = pinned.apply_exact(new_whitelist, spec_diff("eagle3-minimax-m2"), "minimax")
    write_pin(
        pins / "eagle3-whitelist" / "vllm-0.15.1",
        "0.15.1",
        "eagle3-whitelist",
        [(SPEC, pristine, new_whitelist)],
    )
    write_pin(
        pins / "eagle3-minimax-m2" / "vllm-0.15.1",
        "0.15.1",
        "eagle3-minimax-m2",
        [
            (SPEC, new_whitelist, new_minimax),
            (MINIMAX, (pristine_0151 / MINIMAX).read_text(), (site / MINIMAX).read_text()),
        ],
    )
    # eagle3-granite stacks on both in the allow-list file: the upgrade re-pins it too
    granite = "vllm/model_executor/models/granite.py"
    new_granite = pinned.apply_exact(new_minimax, spec_diff("eagle3-granite"), "granite")
    assert new_granite != (site / SPEC).read_text()
    write_pin(
        pins / "eagle3-granite" / "vllm-0.15.1",
        "0.15.1",
        "eagle3-granite",
        [
            (SPEC, new_minimax, new_granite),
            (granite, (pristine_0151 / granite).read_text(), (site / granite).read_text()),
        ],
    )
    states = _states(site, env=env)
    assert states["eagle3-whitelist"] == "outdated", states
    assert states["eagle3-minimax-m2"] == "outdated", states
    assert states["supports-eagle3"] == "applied", states
    assert run_cli("--target", str(site), "status", "--check", env=env).returncode == 1

    run_cli("--target", str(site), "apply", env=env, check=True)
    assert (site / SPEC).read_text() == new_granite  # the top of the re-pinned series
    assert set(_states(site, env=env).values()) == {"applied"}
    run_cli("--target", str(site), "revert", env=env, check=True)
    assert all(touched_match_record(site).values())


def test_capturing_a_file_a_builtin_patches_before_the_builtins_are_applied_is_refused(
    tree_copy,
    pristine_0151: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1", FILES)
    mine = tmp_path / "mine"
    mine.mkdir()
    _edit(site, SPEC, PRISTINE_LIST, '"minicpm", "gpt_oss", "glm4_moe"]')
    before = snapshot(site)
    proc = run_cli("--target", str(site), "--patches", str(mine), "capture", "my-fix")
    assert_refused(proc, 15, SPEC, "eagle3-whitelist, eagle3-minimax-m2", "apply`")
    assert snapshot(site) == before
    assert snapshot(mine) == {}

    # the way the message says: the edit aside, apply, the edit again, capture; it replays
    edited = (site / SPEC).read_bytes()
    (site / SPEC).write_bytes((pristine_0151 / SPEC).read_bytes())
    run_cli("--target", str(site), "apply", check=True)
    _edit(site, SPEC, LIST_0151, '"kimi_k25", "glm4_moe"]')
    run_cli("--target", str(site), "--patches", str(mine), "capture", "my-fix", check=True)
    fresh = tmp_path / "fresh"
    scratch_tree("0.15.1", fresh, FILES)
    run_cli("--target", str(fresh), "--patches", str(mine), "apply", check=True)
    assert (fresh / SPEC).read_bytes() == (site / SPEC).read_bytes() != edited
    # a file no built-in patches is still captured on the pristine tree
    other = tmp_path / "other"
    scratch_tree("0.15.1", other, FILES)
    _edit(other, LOAD, "\n", "\n# mine\n")
    (tmp_path / "m2").mkdir()
    run_cli(
        "--target", str(other), "--patches", str(tmp_path / "m2"), "capture", "mine", check=True
    )


def test_a_patch_without_a_codemod_is_never_labelled_transform(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """my-fix captured on the pristine file where the built-ins were not given (an older tool),
    then status with the built-ins: their series on the file no longer chains, but the method
    shown for eagle3-minimax-m2 (no codemod) is its pinned diff, never `transform`."""
    site = tree_copy("0.15.1", FILES)
    mine = tmp_path / "mine"
    mine.mkdir()
    none = tmp_path / "no-builtins"
    none.mkdir()
    (none / "series").write_text("")
    _edit(site, SPEC, PRISTINE_LIST, '"minicpm", "gpt_oss", "glm4_moe"]')
    run_cli(
        "--target", str(site), "--patches", str(mine), "capture", "my-fix",
        env={"VLLM_PATCHER_PATCHES_DIR": str(none)}, check=True,
    )  # fmt: skip
    methods = {p["name"]: p["method"] for p in _status(site, "--patches", str(mine))["patches"]}
    for patch in CATALOGUE.patches:
        if not patch.transforms:
            assert methods[patch.name] != "transform", methods
    assert methods["eagle3-minimax-m2"] == "pinned-diff", methods
    assert methods["eagle3-whitelist"] == "pinned-diff", methods


@pytest.mark.parametrize("how", ["releases-narrowed", "pin-emptied", "pin-deleted"])
def test_a_recorded_patch_its_folder_no_longer_produces_for_this_release_is_outdated(
    tree_copy,
    pristine_0151: Path,
    tmp_path: Path,
    how: str,  # type: ignore[no-untyped-def]
) -> None:
    """The attack's false green: my-edit applied and recorded, then its folder changed so that it
    gives nothing for 0.15.1: status must not call the old bytes applied; apply takes them out."""
    t = tree_copy("0.15.1", FILES)
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(t), "apply", check=True)
    _edit(t, LOAD, "\n", "\n# attack edit\n")
    run_cli("--target", str(t), "--patches", str(mine), "capture", "my-edit", check=True)
    pin = mine / "my-edit" / "vllm-0.15.1"
    if how == "releases-narrowed":
        toml = mine / "my-edit" / "patch.toml"
        toml.write_text(toml.read_text().replace('releases = "==0.15.1"', 'releases = "==0.16.0"'))
    elif how == "pin-emptied":
        for f in pin.iterdir():
            f.unlink()
    else:
        shutil.rmtree(pin)
    check = run_cli("--target", str(t), "--patches", str(mine), "status", "--check")
    assert check.returncode == 1, check.stdout
    assert _states(t, "--patches", str(mine))["my-edit"] == "outdated"
    run_cli("--target", str(t), "--patches", str(mine), "apply", check=True)
    assert (t / LOAD).read_bytes() == (pristine_0151 / LOAD).read_bytes()
    assert _states(t, "--patches", str(mine))["my-edit"] in ("not-applicable", "unported")
