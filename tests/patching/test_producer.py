"""What produced a codemod's output is recorded, and a tool whose codemods make other bytes finds
the applied file ``outdated`` (patching/survey.py ``producer``, ``_outdated_output``).

A build with no pin (a post-release label here) goes through the codemods. The "upgraded" tool
is a copy of this package with one codemod line changed, run in place of this one (from the
copy's folder, which ``python -m`` puts first on the path), as a new version of the tool would be
on the same venv.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, run_cli, scratch_tree, snapshot

GRANITE = "vllm/model_executor/models/granite.py"


def _post_release(tmp_path: Path, release: str = "0.19.1", name: str = "site") -> Path:
    """``release``'s files labelled ``<release>.post1``: no pin matches, every patch runs its
    codemod."""
    site = scratch_tree(release, tmp_path / name)
    (dist,) = site.glob("vllm-*.dist-info")
    meta = dist / "METADATA"
    meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {release}.post1", meta.read_text()))
    dist.rename(site / f"vllm-{release}.post1.dist-info")
    return site


def _tool(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of this tool whose family codemod has ``new`` for ``old`` (each once): its folder."""
    root = tmp_path / "upgraded"
    shutil.copytree(REPO / "vllm_patcher", root / "vllm_patcher")
    shutil.copytree(REPO / "patches", root / "patches")
    codemod = root / "vllm_patcher" / "transforms" / "eagle3_family.py"
    text = codemod.read_text()
    assert text.count(old) == 1, old
    codemod.write_text(text.replace(old, new))
    return root


def _cli(tool: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    if tool is None:
        return run_cli(*args)
    return subprocess.run(
        [sys.executable, "-m", "vllm_patcher", *args],
        cwd=tool,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _granite(site: Path, tool: Path | None = None) -> tuple[int, str, str]:
    """``status --check``'s exit code, and granite.py's state and detail."""
    proc = _cli(tool, "--target", str(site), "--json", "status", "--check")
    (row,) = [f for f in json.loads(proc.stdout)["files"] if f["path"] == GRANITE]
    return proc.returncode, row["state"], row.get("detail") or ""


def test_a_tool_whose_codemod_makes_other_bytes_finds_the_file_outdated_and_apply_rewrites_it(
    tmp_path: Path,
) -> None:
    site = _post_release(tmp_path)
    run_cli("--target", str(site), "apply", "eagle3-granite", check=True)
    assert _granite(site)[:2] == (0, "applied")
    applied = (site / GRANITE).read_bytes()

    upgraded = _tool(tmp_path, 'OWN_TENSOR = "0"', 'OWN_TENSOR = "0.0"')
    code, state, detail = _granite(site, upgraded)
    assert (code, state) == (1, "outdated"), detail
    assert "another version of the codemods" in detail and "apply" in detail, detail
    assert (site / GRANITE).read_bytes() == applied  # status changes nothing

    done = _cli(upgraded, "--target", str(site), "apply")
    assert done.returncode == 0, done.stderr
    now = (site / GRANITE).read_bytes()
    assert now != applied and b"0.0" in now and b"0.0" not in applied
    assert _granite(site, upgraded)[:2] == (0, "applied")
    # the tool before the upgrade now finds bytes its own codemod does not make
    assert _granite(site)[:2] == (1, "outdated")


def test_a_codemod_change_that_keeps_the_bytes_leaves_the_file_applied(tmp_path: Path) -> None:
    site = _post_release(tmp_path)
    run_cli("--target", str(site), "apply", "eagle3-granite", check=True)
    applied = (site / GRANITE).read_bytes()
    upgraded = _tool(tmp_path, 'MIXIN = "EagleModelMixin"', 'MIXIN = "EagleModelMixin"  # same')
    assert _granite(site, upgraded)[:2] == (0, "applied")
    assert (site / GRANITE).read_bytes() == applied


def test_a_pristine_copy_that_record_contradicts_is_never_taken_for_pristine(
    tmp_path: Path,
) -> None:
    """The kept copy and the state record's before-hash both changed to the patched bytes (by
    hand): status cannot compare the codemods' output from it (outdated, not applied), and revert
    refuses (exit 7) where it said "already pristine" and forgot the record."""
    from vllm_patcher.install.record import file_hash

    from ..conftest import snapshot

    site = _post_release(tmp_path)
    upgraded = _tool(tmp_path, 'OWN_TENSOR = "0"', 'OWN_TENSOR = "0.0"')
    assert _cli(upgraded, "--target", str(site), "apply", "eagle3-granite").returncode == 0
    patched = (site / GRANITE).read_bytes()
    (site / ".vllm-patcher" / "pristine" / GRANITE).write_bytes(patched)
    state = site / ".vllm-patcher" / "state.json"
    record = json.loads(state.read_text())
    record["files"][GRANITE]["before"] = file_hash(patched)
    state.write_text(json.dumps(record, indent=2) + "\n")
    code, got, detail = _granite(site)
    assert (code, got) == (1, "outdated") and "RECORD" in detail, detail
    before = snapshot(site)
    refused = run_cli("--target", str(site), "revert")
    assert refused.returncode == 7 and "RECORD" in refused.stderr, refused.stderr
    assert snapshot(site) == before


# the renamed codemods' patches, and a release each one rewrites (through the codemods)
RENAMED_ON = {
    "0.15.1": ("eagle3-whitelist", "kimi-k25-image-token"),
    "0.14.1": ("eagle3-qwen3-vl",),
}


def _tool_with_old_names(tmp_path: Path) -> Path:
    """A copy of this tool whose built-ins name the renamed codemods as before the rename
    (``transforms/codemod.RENAMED``), as the tool that patched a venv before the rename did: its
    folder. The built-ins go inside its package, where it looks first."""
    from vllm_patcher.transforms.codemod import RENAMED

    root = tmp_path / "old-names"
    ignore = shutil.ignore_patterns("patches", "__pycache__")  # a checkout's link to patches/
    shutil.copytree(REPO / "vllm_patcher", root / "vllm_patcher", ignore=ignore)
    pins = root / "vllm_patcher" / "patches"
    shutil.copytree(REPO / "patches", pins, ignore=shutil.ignore_patterns("__pycache__"))
    for toml in pins.glob("*/patch.toml"):
        text = toml.read_text()
        for old, new in RENAMED.items():
            text = text.replace(f'codemod = "{new}"', f'codemod = "{old}"')
        toml.write_text(text)
    return root


def _records(site: Path) -> dict[str, dict[str, str]]:
    files = json.loads((site / ".vllm-patcher" / "state.json").read_text())["files"]
    return {
        rel: {k: v for k, v in f.items() if k in ("after", "producer")} for rel, f in files.items()
    }


@pytest.mark.parametrize("release", sorted(RENAMED_ON))
def test_a_venv_patched_through_the_codemods_old_names_stays_applied(
    tmp_path: Path, release: str
) -> None:
    """The producer recorded by a tool that named the codemods as before differs from this
    tool's; status runs this tool's codemods on the kept pristine copies, finds the same bytes,
    and says applied; nothing is written."""
    names = RENAMED_ON[release]
    old_tool = _tool_with_old_names(tmp_path)
    site = _post_release(tmp_path, release)
    done = _cli(old_tool, "--target", str(site), "apply", *names)
    assert done.returncode == 0, done.stderr
    before = snapshot(site)
    fresh = _post_release(tmp_path, release, "fresh")  # the same apply by this tool
    run_cli("--target", str(fresh), "apply", *names, check=True)
    old, new = _records(site), _records(fresh)
    assert old.keys() == new.keys() and old
    assert all(old[rel]["after"] == new[rel]["after"] for rel in old)
    assert any(old[rel]["producer"] != new[rel]["producer"] for rel in old)
    proc = run_cli("--target", str(site), "--json", "status", "--check", *names)
    assert proc.returncode == 0, proc.stdout
    report = json.loads(proc.stdout)
    assert {f["state"] for f in report["files"] if f["path"] in old} == {"applied"}
    assert snapshot(site) == before
