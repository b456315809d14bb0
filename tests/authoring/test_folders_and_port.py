"""What a patches folder, its conflicts and port may be trusted with (links, stray
conflict files, bad versions, multi-release --continue, non-canonical paths, ranges that match
nothing; port leaves the patch applicable where it ported it). Real pristine trees of
real releases, the real command line."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from vllm_patcher.catalogue.model import admits_a_release, valid_patch_name

from ..cli.test_json_envelope import answer, error
from ..conftest import assert_refused, run_cli, scratch_tree, snapshot
from .test_own_patches import MINIMAX, _upstream_diff

SPEC = "vllm/config/speculative.py"
LIST_0151 = '"kimi_k25"]'  # the allow-list line as the built-ins leave it on 0.15.1
_COPIES = itertools.count()
CONFLICT = re.compile(r"<<<<<<< [^\n]*\n(.*?)=======\n.*?>>>>>>> [^\n]*\n", re.S)


def _tree(tmp_path: Path, version: str) -> Path:
    """A scratch copy of one release's pristine tree (a new one each call)."""
    dest = tmp_path / f"site-{version}-{next(_COPIES)}"
    return scratch_tree(version, dest)


def _captured(tmp_path: Path, folder: Path, name: str = "my-fix", *extra: str) -> Path:
    """0.15.1 with the built-ins applied, then glm4_moe added to the EAGLE-3 allow-list by hand
    and captured as NAME into ``folder`` (as docs/own-patches.md's walkthrough does)."""
    site = _tree(tmp_path, "0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    spec = site / SPEC
    spec.write_text(spec.read_text().replace(LIST_0151, '"kimi_k25", "glm4_moe"]'))
    folder.mkdir(parents=True, exist_ok=True)  # a --patches folder must exist
    run_cli("--target", str(site), "--patches", str(folder), "capture", name, *extra, check=True)
    return site


def _resolve(marked: Path) -> None:
    """Resolve as a user would: keep the release's list, add the entry."""
    marked.write_text(
        CONFLICT.sub(
            lambda m: m.group(1).replace('"kimi_k25",\n', '"kimi_k25",\n            "glm4_moe",\n'),
            marked.read_text(),
        )
    )


def _states(site: Path, mine: Path) -> dict[str, str]:
    out = run_cli("--target", str(site), "--patches", str(mine), "--json", "status").stdout
    return {p["name"]: p["state"] for p in json.loads(out)["patches"]}


# --- 8: links in patch folders ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["patch-folder-link", "series-link", "series-entry-outside"])
def test_a_link_or_an_outside_series_entry_in_a_patches_folder_is_refused(
    tmp_path: Path, how: str
) -> None:
    other = tmp_path / "other"
    _captured(tmp_path, other)
    mine = tmp_path / "mine"
    mine.mkdir()
    if how == "patch-folder-link":
        (mine / "my-fix").symlink_to(other / "my-fix")
        fragment = "symbolic link"
    elif how == "series-link":
        shutil.copytree(other / "my-fix", mine / "my-fix")
        (other / "series").write_text("my-fix\n")
        (mine / "series").symlink_to(other / "series")
        fragment = "symbolic link"
    else:  # the series loads a patch from outside its folder
        (mine / "series").write_text("../other/my-fix\n")
        fragment = "not a patch name"
    site = _tree(tmp_path, "0.15.1")
    before = snapshot(site)
    for command in ("status", "apply", "list"):
        proc = run_cli("--target", str(site), "--patches", str(mine), command)
        assert_refused(proc, 13, fragment)
    assert snapshot(site) == before
    # the same patch as a plain folder of its own is taken
    plain = tmp_path / "plain"
    shutil.copytree(other / "my-fix", plain / "my-fix")
    assert _states(site, plain)["my-fix"] == "pending"


def test_the_patch_name_rule_refuses_paths_and_hidden_names() -> None:
    assert all(valid_patch_name(n) for n in ("my-fix", "eagle3-minimax-m2", "a.b_c", "0fix"))
    assert not any(
        valid_patch_name(n)
        for n in ("", ".", "..", "../other/my-fix", "a/b", ".hidden", "-x", "_x", "Bad", "a b")
    )


# --- 9: stray files in a conflicts folder ------------------------------------------------------


def test_editor_files_in_a_conflicts_folder_are_left_out_of_port_continue(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.17.1")
    assert run_cli(*args).returncode == 17
    marked = mine / "my-fix" / "conflicts" / "vllm-0.17.1" / SPEC
    backup = marked.with_name(marked.name + "~")  # emacs: the marked text before the edit
    backup.write_text(marked.read_text())
    _resolve(marked)
    swap = marked.with_name(f".{marked.name}.swp")  # vim's swap file: binary
    swap.write_bytes(b"b0VIM 9.0\x00\x00\xff\xfe\x80" + bytes(range(256)))
    data = answer(run_cli("--json", *args, "--continue"), "port", 0)
    assert [(r["version"], r["outcome"]) for r in data["releases"]] == [("0.17.1", "clean")]
    manifest = json.loads((mine / "my-fix" / "vllm-0.17.1" / "manifest.json").read_text())
    assert list(manifest["files"]) == [SPEC]
    diff = (mine / "my-fix" / "vllm-0.17.1" / "patch.diff").read_text()
    assert '+            "glm4_moe",' in diff and "<<<<<<<" not in diff
    assert not (mine / "my-fix" / "conflicts").exists()


def test_a_resolved_file_that_is_not_utf8_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.17.1")
    assert run_cli(*args).returncode == 17
    marked = mine / "my-fix" / "conflicts" / "vllm-0.17.1" / SPEC
    _resolve(marked)
    marked.write_bytes(marked.read_bytes().replace(b'"glm4_moe"', b'"glm4_mo\xe9"'))  # latin-1
    before = snapshot(mine)
    assert_refused(run_cli(*args, "--continue"), 17, "not UTF-8", "save it as UTF-8")
    error(run_cli("--json", *args, "--continue"), "port", 17, "not UTF-8")
    assert snapshot(mine) == before


def test_editor_files_in_a_conflicts_folder_are_left_out_of_import_continue(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    scratch_tree("0.15.1", site, [MINIMAX])
    mine = tmp_path / "mine"
    mine.mkdir()
    args = ("--target", str(site), "--patches", str(mine), "import", "mm-eagle")
    assert run_cli(*args, "--diff", str(_upstream_diff(tmp_path))).returncode == 17
    pending = mine / "mm-eagle" / "conflicts" / "vllm-0.15.1" / MINIMAX
    pending.with_name(pending.name + "~").write_text(pending.read_text())
    pending.write_text(CONFLICT.sub(lambda m: m.group(1), pending.read_text()))
    pending.with_name(f".{pending.name}.swp").write_bytes(b"b0VIM 9.0\x00\xff\xfe\x80")
    data = answer(run_cli("--json", *args, "--continue"), "import", 0)
    assert data["written"] and list(data["files"]) == [MINIMAX]
    manifest = json.loads((mine / "mm-eagle" / "vllm-0.15.1" / "manifest.json").read_text())
    assert list(manifest["files"]) == [MINIMAX]


# --- 10: a bad version --------------------------------------------------------------------------


def test_a_release_to_port_to_that_is_not_a_version_is_a_usage_error(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    before = snapshot(mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.17.1", "--to", "notaversion")
    assert_refused(run_cli(*args), 2, "'notaversion' is not a vLLM version")
    error(run_cli("--json", *args), "port", 2, "'notaversion' is not a vLLM version")
    error(run_cli("--json", *args, "--continue"), "port", 2, "'notaversion'")
    assert snapshot(mine) == before


# --- 11: a multi-release --continue -------------------------------------------------------------


def _rows(stdout: str) -> list[tuple[str, str]]:
    return re.findall(
        r"^\s+vllm (\S+)\s+(clean|conflict|already pinned|markers remain)", stdout, re.M
    )


def test_a_multi_release_continue_reports_every_release_and_can_be_run_again(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.16.0", "--to", "0.17.1")
    assert run_cli(*args).returncode == 17
    conflicts = mine / "my-fix" / "conflicts"
    _resolve(conflicts / "vllm-0.16.0" / SPEC)  # 0.17.1 is left as it is

    proc = run_cli(*args, "--continue")
    assert_refused(proc, 17, "conflict markers remain", "vllm-0.17.1")
    assert _rows(proc.stdout) == [("0.16.0", "clean"), ("0.17.1", "markers remain")], proc.stdout
    assert (mine / "my-fix" / "vllm-0.16.0" / "patch.diff").is_file()
    assert not (conflicts / "vllm-0.16.0").exists() and (conflicts / "vllm-0.17.1").is_dir()

    # the same command again is consistent: 0.16.0 is done, 0.17.1 still waits
    proc = run_cli(*args, "--continue")
    assert_refused(proc, 17, "conflict markers remain")
    assert _rows(proc.stdout) == [("0.16.0", "already pinned"), ("0.17.1", "markers remain")]
    data = answer(run_cli("--json", *args, "--continue"), "port", 17)
    assert [(r["version"], r["outcome"], r["files"]) for r in data["releases"]] == [
        ("0.16.0", "already pinned", []),
        ("0.17.1", "markers remain", [SPEC]),
    ]
    assert any("still has conflict markers (line" in n for n in data["notes"])

    _resolve(conflicts / "vllm-0.17.1" / SPEC)
    proc = run_cli(*args, "--continue", check=True)
    assert _rows(proc.stdout) == [("0.16.0", "already pinned"), ("0.17.1", "clean")]
    assert not conflicts.exists()


def test_a_continue_refused_for_one_release_writes_none(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.16.0", "--to", "0.17.1")
    assert run_cli(*args).returncode == 17
    _resolve(mine / "my-fix" / "conflicts" / "vllm-0.16.0" / SPEC)
    (mine / "my-fix" / "conflicts" / "vllm-0.17.1" / SPEC).unlink()
    before = snapshot(mine)
    assert_refused(run_cli(*args, "--continue"), 17, "is missing")
    assert snapshot(mine) == before


# --- 12: non-canonical paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    ["vllm/./config/speculative.py", "vllm//config/speculative.py", "vllm/config\\speculative.py"],
)
def test_a_path_not_written_plainly_in_a_manifest_and_diff_is_a_malformed_folder(
    tmp_path: Path, written: str
) -> None:
    """Written so in both (so they agree with each other), on a pristine tree: not a local edit
    (exit 5) but a malformed folder (13), from status on."""
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    release = mine / "my-fix" / "vllm-0.15.1"
    diff = release / "patch.diff"
    diff.write_text(
        diff.read_text().replace(f"a/{SPEC}", f"a/{written}").replace(f"b/{SPEC}", f"b/{written}")
    )
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["files"] = {written: manifest["files"][SPEC]}
    (release / "manifest.json").write_text(json.dumps(manifest))
    site = _tree(tmp_path, "0.15.1")  # pristine: its files are what pip installed
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        proc = run_cli("--target", str(site), "--patches", str(mine), command)
        assert_refused(proc, 13, "not a plain path", repr(written))
    assert snapshot(site) == before


# --- 14: a release below the supported range, a file a release lacks, a range of nothing ---------


def test_port_to_a_release_older_than_0_11_0_is_refused_before_anything_is_fetched(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)
    before = snapshot(mine)
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.10.2")
    proc = run_cli(*args)
    assert_refused(proc, 4, "older than 0.11.0")
    assert "conflicts" not in proc.stdout + proc.stderr
    error(run_cli("--json", *args), "port", 4, "older than 0.11.0")
    assert snapshot(mine) == before


def test_port_to_a_release_without_a_touched_file_says_so_and_not_to_resolve_markers(
    tmp_path: Path,
) -> None:
    site = _tree(tmp_path, "0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    with (site / MINIMAX).open("a") as fh:
        fh.write("# MiniMax-M2 tweak\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(site), "--patches", str(mine), "capture", "mm-tweak", check=True)
    proc = run_cli("--patches", str(mine), "port", "mm-tweak", "--to", "0.11.0")
    assert proc.returncode == 17, proc.stderr
    assert re.search(r"0\.11\.0\s+file absent \(" + re.escape(MINIMAX), proc.stdout)
    assert "has no " + MINIMAX in proc.stdout and "resolve the markers" not in proc.stdout
    assert not (mine / "mm-tweak" / "conflicts").exists()


@pytest.mark.parametrize(
    "releases", ['">=1.0,<0.5"', '"==0.15.1,!=0.15.1"', '["==0.15.1", ">=0.16,<0.15"]', "[]"]
)
def test_a_releases_range_that_matches_no_release_is_a_malformed_folder(
    tmp_path: Path, releases: str
) -> None:
    mine = tmp_path / "mine"
    (mine / "nothing").mkdir(parents=True)
    (mine / "nothing" / "patch.toml").write_text(f'name = "nothing"\nreleases = {releases}\n')
    site = _tree(tmp_path, "0.15.1")
    before = snapshot(site)
    for command in ("status", "apply", "list"):
        proc = run_cli("--target", str(site), "--patches", str(mine), command)
        assert_refused(proc, 13, "matches no release")
    assert snapshot(site) == before


def test_a_specifier_admits_a_release_exactly_when_one_satisfies_it() -> None:
    admitted = [
        "",
        "==0.15.1",
        ">=0.15.0,<0.20",
        "~=0.15.0",
        "==0.15.*",
        ">=1.0,!=1.*",
        ">0.15,<0.15.0.1",
        "===0.15.1",
    ]
    empty = [
        ">=1.0,<0.5",
        "==0.15.1,!=0.15.1",
        ">=1.0,!=1.*,<2",
        "~=1.4.5,!=1.4.*",
        "<0",
        "==1.0rc1",
        "===0.15.01",
    ]
    assert [s for s in admitted if not admits_a_release(SpecifierSet(s))] == []
    assert [s for s in empty if admits_a_release(SpecifierSet(s))] == []


# --- port finishes the job ---------------------------------------------------------------------


def test_a_patch_ported_to_other_releases_is_applied_there(tmp_path: Path) -> None:
    site = _tree(tmp_path, "0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    spec = site / SPEC
    doc = '    """Configuration for speculative decoding."""\n'
    spec.write_text(spec.read_text().replace(doc, doc.replace(".", " (GLM-4.5 drafters too).", 1)))
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(site), "--patches", str(mine), "capture", "my-glm", check=True)
    toml = mine / "my-glm" / "patch.toml"
    assert 'releases = "==0.15.1"' in toml.read_text()

    proc = run_cli("--patches", str(mine), "port", "my-glm", "--to", "0.13.0", "--to", "0.17.1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "added 0.13.0, 0.17.1 to releases" in proc.stdout
    assert '"==0.13.0"' in toml.read_text() and '"==0.17.1"' in toml.read_text()

    for version in ("0.13.0", "0.17.1"):
        fresh = _tree(tmp_path, version)
        assert _states(fresh, mine)["my-glm"] == "pending"
        listed = answer(run_cli("--patches", str(mine), "--json", "list"), "list", 0)
        row = next(r for r in listed["releases"] if r["version"] == version)
        assert row["patches"]["my-glm"] == "pinned-diff"
        out = run_cli("--target", str(fresh), "--patches", str(mine), "apply", check=True).stdout
        assert re.search(r"my-glm\s+applied now", out), out
        assert "(GLM-4.5 drafters too)" in (fresh / SPEC).read_text()
        assert _states(fresh, mine)["my-glm"] == "applied"
        assert (
            run_cli("--target", str(fresh), "--patches", str(mine), "status", "--check").returncode
            == 0
        )
    # releases between them have no diff, and stay outside the patch (not `unported`)
    assert _states(_tree(tmp_path, "0.14.1"), mine)["my-glm"] == "not-applicable"
    # a recapture on 0.15.1 keeps the list port wrote
    run_cli(
        "--target",
        str(site),
        "--patches",
        str(mine),
        "capture",
        "my-glm",
        "--summary",
        "GLM",
        check=True,
    )
    assert '"==0.13.0"' in toml.read_text()
    assert _states(_tree(tmp_path, "0.13.0"), mine)["my-glm"] == "pending"


def test_a_continue_that_completes_a_release_adds_it_to_releases(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    _captured(tmp_path, mine)  # releases = "==0.15.1"
    args = ("--patches", str(mine), "port", "my-fix", "--to", "0.17.1")
    assert run_cli(*args).returncode == 17
    _resolve(mine / "my-fix" / "conflicts" / "vllm-0.17.1" / SPEC)
    run_cli(*args, "--continue", check=True)
    fresh = _tree(tmp_path, "0.17.1")
    run_cli("--target", str(fresh), "--patches", str(mine), "apply", check=True)
    assert _states(fresh, mine)["my-fix"] == "applied"
    assert '"glm4_moe",' in (fresh / SPEC).read_text()


@pytest.mark.parametrize(
    "text",
    [
        "tool = 3\n",
        "[tool]\nvllm-patcher = 3\n",
        '[tool.vllm-patcher]\npatches = "my-patches"\n',
        "[tool.vllm-patcher]\nselect = [1]\n",
        "[tool.vllm-patcher\n",
    ],
)
def test_a_malformed_pyproject_table_is_refused_not_a_traceback(tmp_path: Path, text: str) -> None:
    """status and apply read ``[tool.vllm-patcher]`` of the pyproject.toml where they run."""
    site = tmp_path / "site"
    scratch_tree("0.15.1", site)
    (tmp_path / "pyproject.toml").write_text(text)
    before = snapshot(site)
    for command in ("status", "apply"):
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_patcher", "--target", str(site), command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "VLLM_PATCHER_PATCHES"},
            check=False,
        )
        assert_refused(proc, 13, "pyproject.toml")
    assert snapshot(site) == before
