"""vllm_patcher/patching/plan.py: which bytes each file gets, through the real command line. A
locally modified, missing or non-UTF-8 file is refused by name and nothing is patched; pinned
diffs applied by hand are adopted, not rewritten; revert plans from the tool's own record (over
a RECORD edited since, and for a patched file deleted since)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from vllm_patcher.install.record import file_hash

from ..conftest import (
    assert_refused,
    pinned_diffs,
    record_of,
    run_cli,
    snapshot,
    states_on,
    touched_files,
    touched_match_record,
)
from .sites import SPEC, _rewrite_record, _states

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def test_locally_modified_file_is_named_and_nothing_is_patched(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    hotfix = site / "vllm/model_executor/models/kimi_k25.py"
    hotfix.write_text(hotfix.read_text() + "# local hotfix\n")
    before = snapshot(site)
    proc = run_cli("--target", str(site), "apply")
    assert_refused(proc, 5, str(hotfix), "differs from what pip installed")
    assert snapshot(site) == before
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert {p["name"]: p["state"] for p in st["patches"]}["supports-eagle3"] == "drifted"


def test_a_file_that_is_not_utf8_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    _rewrite_record(site, DEEPSEEK, (site / DEEPSEEK).read_bytes() + b"# \xff\xfe latin-1 bytes\n")
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "apply"), 10, "not UTF-8")
    assert snapshot(site) == before


def test_a_missing_file_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    (site / SPEC).unlink()
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "apply"), 5, "reinstall vLLM")
    assert snapshot(site) == before
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    assert st["patches"][0]["state"] == "drifted" and "missing" in st["patches"][0]["detail"]


def test_hand_applied_pinned_diffs_are_unrecorded_then_adopted_and_revertable(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    record = record_of(site)
    rels = touched_files(record, "0.15.1")
    for diff in pinned_diffs("0.15.1"):
        subprocess.run(["git", "apply", "-p1", str(diff)], cwd=site, check=True)
    assert _states(site) == set(states_on("0.15.1", "unrecorded"))
    # not ready: a CI gate or a cluster verdict must not take hand-applied bytes as applied
    verify = run_cli("--target", str(site), "verify")
    assert verify.returncode == 1 and "unrecorded" in verify.stdout
    patched = {rel: (site / rel).read_bytes() for rel in rels}
    out = json.loads(run_cli("--target", str(site), "--json", "apply", check=True).stdout)
    assert sorted(out["adopted"]) == sorted(rels) and out["changed"] == []
    assert {rel: (site / rel).read_bytes() for rel in rels} == patched  # nothing rewritten
    assert _states(site) == set(states_on("0.15.1", "applied"))
    run_cli("--target", str(site), "revert", check=True)
    assert all(file_hash((site / rel).read_bytes()) == record[rel] for rel in rels)


def test_revert_trusts_its_own_record_over_an_edited_record_file(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """RECORD rewritten to list the patched bytes must not make revert drop the pristine copy."""
    site = tree_copy("0.15.1")
    pristine = (site / SPEC).read_bytes()
    run_cli("--target", str(site), "apply", check=True)
    _rewrite_record(site, SPEC, (site / SPEC).read_bytes())  # a tool regenerated RECORD
    out = json.loads(run_cli("--target", str(site), "--json", "revert", check=True).stdout)
    assert SPEC in out["restored"] and SPEC not in out["already_pristine"]
    assert (site / SPEC).read_bytes() == pristine


def test_a_deleted_patched_file_is_restored_by_revert(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    (site / "vllm/model_executor/models/kimi_k25.py").unlink()
    run_cli("--target", str(site), "revert", check=True)
    assert all(touched_match_record(site).values())


def test_a_patch_naming_a_file_the_release_does_not_install_is_the_patchs_fault(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The breaker: a patch of the user's whose diff names vllm/config/nosuch.py was refused with
    "is missing; reinstall vLLM" (exit 5), which no reinstall fixes. It is the patch folder's
    matter (exit 13), named with the way on; nothing changes."""
    import difflib

    site = tree_copy("0.15.1")
    text = (site / "vllm/config/speculative.py").read_text()
    patched = text + "# mine\n"
    rel = "vllm/config/nosuch.py"
    folder = tmp_path / "mine" / "my-fix"
    (folder / "vllm-0.15.1").mkdir(parents=True)
    (folder / "patch.toml").write_text(
        'name = "my-fix"\nsummary = "a file of another release"\nreleases = "==0.15.1"\n'
    )
    diff = difflib.unified_diff(
        text.splitlines(keepends=True), patched.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
    )
    (folder / "vllm-0.15.1" / "patch.diff").write_text("".join(diff))
    manifest = {
        "vllm_version": "0.15.1",
        "patch": "my-fix",
        "files": {rel: {"before": file_hash(text.encode()), "after": file_hash(patched.encode())}},
    }
    (folder / "vllm-0.15.1" / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(site)
    proc = run_cli("--target", str(site), "--patches", str(tmp_path / "mine"), "apply", "my-fix")
    assert_refused(proc, 13, "my-fix changes vllm/config/nosuch.py, which vLLM 0.15.1 does not")
    assert snapshot(site) == before
