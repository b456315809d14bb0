"""What capture and import promise about the patch they write: it replays with the same options
on a fresh tree, it holds every change or is refused (new, deleted, CRLF), its name is one the
loader takes, its patch.toml reads back, and its hints name the same environment. Real pristine
0.15.1 files; the real command line."""

from __future__ import annotations

import csv
import difflib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_patcher.catalogue.layout import builtin_paths
from vllm_patcher.wheels import sources

from ..conftest import CATALOGUE, assert_refused, record_of, run_cli
from ..conftest import snapshot as snapshot_of

SPEC = "vllm/config/speculative.py"
MODEL = "vllm/config/model.py"
LOAD = "vllm/config/load.py"
LIST_0151 = '"kimi_k25"]'  # the allow-list line as the built-ins leave it on 0.15.1
RULE = "lower-case letters, digits"  # the name rule's words in every refusal of a bad name


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Real 0.15.1 files as an install holds them: ``vllm/__init__.py`` is there and RECORD lists
    exactly the files that are (a smaller wheel of the same bytes), so a missing one is a
    deletion; and the env that points the runs at a cache of their own (never the shared one,
    whose trees hold only some files)."""
    cache = tmp_path_factory.mktemp("cache")
    paths = [
        *builtin_paths(CATALOGUE, "0.15.1"),
        "vllm/__init__.py",
        "vllm/config/__init__.py",
        MODEL,
        LOAD,
    ]
    site = tmp_path_factory.mktemp("installed") / "site-packages"
    shutil.copytree(
        sources.fetch_release("0.15.1", paths, cache=cache),
        site,
        ignore=shutil.ignore_patterns(".complete"),
    )
    (record,) = site.glob("vllm-*.dist-info/RECORD")
    with record.open(newline="") as fh:
        rows = [
            r for r in csv.reader(fh) if not r[0].startswith("vllm/") or (site / r[0]).is_file()
        ]
    with record.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return site, {"VLLM_PATCHER_CACHE": str(cache)}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the lock files of the sites in it (every run takes a lock)."""
    return {k: v for k, v in snapshot_of(root).items() if not k.endswith(".vllm-patcher/lock")}


def _site(installed: tuple[Path, dict[str, str]], dest: Path) -> Path:
    shutil.copytree(installed[0], dest, ignore=shutil.ignore_patterns(".complete"))
    return dest


def _cli(env: dict[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env, check=check)


def _edit(site: Path, rel: str, old: str, new: str) -> None:
    path = site / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


def _states(env: dict[str, str], site: Path, *patches: str) -> dict[str, str]:
    out = _cli(env, "--target", str(site), *patches, "--json", "status", check=True).stdout
    return {p["name"]: p["state"] for p in json.loads(out)["patches"]}


def _stacked_two(installed, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The built-ins applied, my-fix captured into P on the allow-list line, then a second edit of
    that line waiting to be captured on top of my-fix."""
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    p, p2 = tmp_path / "P", tmp_path / "P2"
    p.mkdir()
    p2.mkdir()
    _cli(env, "--target", str(site), "apply", check=True)
    _edit(site, SPEC, LIST_0151, '"kimi_k25", "m1"]')
    _cli(env, "--target", str(site), "--patches", str(p), "capture", "my-fix", check=True)
    _edit(site, SPEC, '"m1"]', '"m1", "m2"]')
    return env, site, p, p2


def _fresh_apply(installed, dest: Path, *patches: str) -> bytes:  # type: ignore[no-untyped-def]
    """A fresh pristine tree, `apply` with the given folders, and the allow-list file it leaves."""
    env = installed[1]
    fresh = _site(installed, dest)
    _cli(env, "--target", str(fresh), *patches, "apply", check=True)
    assert all(
        s == "applied"
        for s in _states(env, fresh, *patches).values()
        if s not in ("upstream", "not-applicable")
    )
    _cli(env, "--target", str(fresh), *patches, "status", "--check", check=True)
    return (fresh / SPEC).read_bytes()


# --- 2: the recorded series order is the order the same options replay --------------------------


def test_capture_writes_into_the_last_patches_folder_so_a_fresh_tree_replays_it(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env, site, p, p2 = _stacked_two(installed, tmp_path)
    options = ("--patches", str(p), "--patches", str(p2))
    proc = _cli(env, "--target", str(site), *options, "capture", "two")
    assert proc.returncode == 0, proc.stderr
    assert (p2 / "two" / "vllm-0.15.1" / "patch.diff").is_file() and not (p / "two").exists()
    assert _fresh_apply(installed, tmp_path / "fresh", *options) == (site / SPEC).read_bytes()


def test_the_new_folder_listed_first_still_records_the_order_the_options_replay(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The issue's command: the last folder (P, which holds my-fix) takes `two`, so the same
    options replay it on a fresh tree."""
    env, site, p, p2 = _stacked_two(installed, tmp_path)
    options = ("--patches", str(p2), "--patches", str(p))
    _cli(env, "--target", str(site), *options, "capture", "two", check=True)
    assert _fresh_apply(installed, tmp_path / "fresh", *options) == (site / SPEC).read_bytes()


def test_recapturing_in_a_folder_that_replays_before_its_base_is_refused_with_the_order_that_works(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env, site, p, p2 = _stacked_two(installed, tmp_path)
    _cli(env, "--target", str(site), "--patches", str(p), "--patches", str(p2), "capture", "two",
         check=True)  # fmt: skip
    _edit(site, SPEC, '"m2"]', '"m2", "m3"]')
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(p2), "--patches", str(p), "capture",
                "two")  # fmt: skip
    assert_refused(proc, 15, "two", "my-fix", f"list --patches {p2} after --patches {p}")
    # a new patch on top of both, with the folders in an order that replays them the other way
    proc = _cli(env, "--target", str(site), "--patches", str(p2), "--patches", str(p), "capture",
                "three")  # fmt: skip
    assert_refused(proc, 15, "my-fix, two in that order", "--patches folders in the order")
    assert snapshot(tmp_path) == before


def test_a_name_that_sorts_before_the_patch_it_stacks_on_is_refused_and_a_series_file_takes_it(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env, site, p, _ = _stacked_two(installed, tmp_path)
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(p), "capture", "a-fix")
    assert_refused(proc, 15, "a-fix", "my-fix", "sorts after my-fix", f"{p / 'series'}")
    assert snapshot(tmp_path) == before
    # with the folder's order in a series file, the new patch is appended: it replays last
    (p / "series").write_text("my-fix\n")
    _cli(env, "--target", str(site), "--patches", str(p), "capture", "a-fix", check=True)
    assert (p / "series").read_text() == "my-fix\na-fix\n"
    assert (
        _fresh_apply(installed, tmp_path / "fresh", "--patches", str(p))
        == (site / SPEC).read_bytes()
    )


def test_an_import_that_would_replay_before_a_patch_it_stacks_on_is_refused(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env, site, p, _ = _stacked_two(installed, tmp_path)
    on_my_fix = (site / SPEC).read_text().replace('"m1", "m2"]', '"m1"]')
    diff = tmp_path / "up.diff"
    diff.write_text(_diff(SPEC, on_my_fix, on_my_fix.replace('"m1"]', '"m1", "up"]')))
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(p), "import", "a-up", "--diff",
                str(diff))  # fmt: skip
    assert_refused(proc, 15, "a-up", "my-fix", "sorts after my-fix")
    assert snapshot(tmp_path) == before


# --- 3: new and deleted files are refused, never dropped --------------------------------------


def test_capture_refuses_a_new_file_beside_an_edit_and_writes_nothing(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    mine = tmp_path / "mine"
    mine.mkdir()
    _edit(site, MODEL, "\n", "\n# edited\n")
    (site / "vllm/config/brand_new.py").write_text("x = 1\n")
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "capture", "nf")
    assert_refused(proc, 15, "vllm/config/brand_new.py", "new file", "existing files only")
    assert snapshot(tmp_path) == before
    # a new file alone is refused as new too, not as "nothing to capture"
    shutil.copy2(installed[0] / MODEL, site / MODEL)
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "capture", "nf")
    assert_refused(proc, 15, "vllm/config/brand_new.py", "new file")
    # bytecode and the tool's own state folder are not new files
    (site / "vllm/config/brand_new.py").unlink()
    _edit(site, MODEL, "\n", "\n# edited\n")
    (site / "vllm/config/__pycache__").mkdir()
    (site / "vllm/config/__pycache__/model.cpython-311.pyc").write_bytes(b"\0bytecode")
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "--json", "capture", "nf")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["files"] == [MODEL]


def test_capture_refuses_a_deleted_file_beside_an_edit_and_writes_nothing(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    mine = tmp_path / "mine"
    mine.mkdir()
    _edit(site, MODEL, "\n", "\n# edited\n")
    (site / LOAD).unlink()
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "capture", "gone")
    assert_refused(proc, 15, LOAD, "deleted", "existing files only")
    assert snapshot(tmp_path) == before
    # naming the edited file captures it alone, on purpose
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "capture", "gone", MODEL)
    assert proc.returncode == 0, proc.stderr


# --- 4: a carriage return is refused; without it the diff applies both ways -------------------


def test_a_carriage_return_in_an_edit_is_refused_and_the_same_edit_without_it_applies_fresh(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    mine = tmp_path / "mine"
    mine.mkdir()
    lines = (site / LOAD).read_bytes().split(b"\n")
    lines[10] += b"  # edited\r"
    (site / LOAD).write_bytes(b"\n".join(lines))
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "capture", "crlf")
    assert_refused(proc, 15, LOAD, "carriage return", "\\n")
    assert snapshot(tmp_path) == before
    # the same edit with \n line endings: apply on a fresh tree and `git apply --check` take it
    (site / LOAD).write_bytes((site / LOAD).read_bytes().replace(b"\r", b""))
    _cli(env, "--target", str(site), "--patches", str(mine), "capture", "crlf", check=True)
    fresh = _site(installed, tmp_path / "fresh")
    _cli(env, "--target", str(fresh), "--patches", str(mine), "apply", "crlf", check=True)
    assert (fresh / LOAD).read_bytes() == (site / LOAD).read_bytes()
    pristine = _site(installed, tmp_path / "pristine")
    diff = mine / "crlf" / "vllm-0.15.1" / "patch.diff"
    subprocess.run(["git", "apply", "--check", str(diff)], cwd=pristine, check=True)


# --- 5: one name rule, the loader's, for every command that takes NAME -------------------------


@pytest.mark.parametrize("name", ["../escape", "ABS", "Bad_Name", ".hidden", "_private", ""])
@pytest.mark.parametrize("command", ["capture", "import", "port", "apply"])
def test_a_bad_patch_name_is_a_usage_error_for_every_command_and_creates_nothing(
    installed, tmp_path: Path, name: str, command: str
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    mine = tmp_path / "deep" / "mine"
    mine.mkdir(parents=True)
    _edit(site, MODEL, "\n", "\n# edited\n")
    diff = tmp_path / "up.diff"
    original = (installed[0] / MODEL).read_text()
    diff.write_text(_diff(MODEL, original, original.replace("\n", "\n# up\n", 1)))
    if name == "ABS":
        name = str(tmp_path / "abs" / "p")
    extra = {
        "capture": [],
        "import": ["--diff", str(diff)],
        "port": ["--to", "0.15.0"],
        "apply": [],
    }[command]
    before = snapshot(tmp_path)
    proc = _cli(env, "--target", str(site), "--patches", str(mine), command, name, *extra)
    assert_refused(proc, 2, RULE)
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "site", "up.diff"]


# --- 6: patch.toml is written by a TOML library and reads back as given ------------------------


@pytest.mark.parametrize(
    "summary",
    ["a\nb", 'say "hi" \\ back\\slash', "ünïcødé ✓ 漢字", "ctrl \x01\x1f\x7f\ttab\r"],
    ids=["newline", "quotes-backslash", "unicode", "control"],
)
def test_any_summary_and_releases_capture_to_a_patch_toml_the_tool_reads_back(
    installed, tmp_path: Path, summary: str
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    mine = tmp_path / "mine"
    mine.mkdir()
    _edit(site, MODEL, "\n", "\n# edited\n")
    releases = " >=0.15.0 ,\t<0.20\n"
    args = ("--target", str(site), "--patches", str(mine))
    _cli(env, *args, "capture", "s6", "--summary", summary, "--releases", releases, check=True)
    listed = json.loads(_cli(env, *args, "--json", "list", check=True).stdout)
    mine_row = {p["name"]: p for p in listed["patches"]}["s6"]
    assert mine_row["summary"] == summary
    assert mine_row["releases"] == "<0.20,>=0.15.0"
    assert _states(env, site, "--patches", str(mine))["s6"] == "applied"
    # a second capture keeps them, and a new summary replaces only the summary
    _cli(env, *args, "capture", "s6", "--summary", summary + "\n2", check=True)
    again = json.loads(_cli(env, *args, "--json", "list", check=True).stdout)
    assert {p["name"]: p["summary"] for p in again["patches"]}["s6"] == summary + "\n2"


# --- 14 (part): --patches must be an existing folder; hints name the same environment --------


def test_a_patches_option_naming_a_file_is_the_same_clear_refusal_for_capture_and_apply(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    _edit(site, MODEL, "\n", "\n# edited\n")
    afile = tmp_path / "FILE"
    afile.write_text("")
    before = snapshot(tmp_path)
    for command in (["capture", "f"], ["apply"], ["import", "f", "--diff", str(afile)]):
        proc = _cli(env, "--target", str(site), "--patches", str(afile), *command)
        assert_refused(proc, 13, f"patch folder {afile} is not a folder")
    assert snapshot(tmp_path) == before


def test_capture_and_import_never_create_a_missing_patches_folder(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    site = _site(installed, tmp_path / "site")
    typo = tmp_path / "typo" / "deep"
    diff = tmp_path / "up.diff"
    original = (installed[0] / MODEL).read_text()
    diff.write_text(_diff(MODEL, original, original.replace("\n", "\n# up\n", 1)))
    before = snapshot(tmp_path)
    for command in (["capture", "f"], ["import", "f", "--diff", str(diff)]):  # nothing edited
        proc = _cli(env, "--target", str(site), "--patches", str(typo), *command)
        assert_refused(proc, 13, f"patch folder {typo} does not exist", "mkdir -p")
    _edit(site, MODEL, "\n", "\n# edited\n")
    proc = _cli(env, "--target", str(site), "--patches", str(typo), "capture", "f")
    assert_refused(proc, 13, "does not exist")
    assert not (tmp_path / "typo").exists()
    shutil.copy2(installed[0] / MODEL, site / MODEL)
    assert snapshot(tmp_path) == before
    # a refusal after the folder was read leaves nothing either: an import already in vLLM
    mine = tmp_path / "mine"
    mine.mkdir()
    lines = original.splitlines(keepends=True)
    diff.write_text(_diff(MODEL, "".join(lines[:1] + lines[2:]), original))
    proc = _cli(env, "--target", str(site), "--patches", str(mine), "import", "f", "--diff",
                str(diff))  # fmt: skip
    assert_refused(proc, 13, "already in vLLM")
    assert list(mine.iterdir()) == []


def test_capture_and_import_hints_name_the_same_environment_and_work_as_printed(
    installed, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = installed[1]
    applied = _site(installed, tmp_path / "applied")
    _cli(env, "--target", str(applied), "apply", check=True)
    on_builtins = (applied / SPEC).read_text()
    diff = tmp_path / "up.diff"
    diff.write_text(
        _diff(SPEC, on_builtins, on_builtins.replace(LIST_0151, LIST_0151[:-1] + ', "up"]'))
    )
    site = _site(installed, tmp_path / "site")  # the built-ins not applied here
    mine = tmp_path / "mine"
    mine.mkdir()
    args = ("--target", str(site), "--patches", str(mine))
    proc = _cli(env, *args, "import", "imp", "--diff", str(diff), check=True)
    hint = proc.stdout.strip().splitlines()[-1].split("`")[1]
    assert hint.startswith(f"vllm-patcher --target {site} --patches {mine} apply "), hint
    ran = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", *shlex.split(hint)[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert ran.returncode == 0, ran.stderr
    assert '"up"]' in (site / SPEC).read_text()
    assert _states(env, site, "--patches", str(mine))["imp"] == "applied"
    # capture's hint names the environment too
    other = _site(installed, tmp_path / "other")
    _edit(other, MODEL, "\n", "\n# edited\n")
    out = _cli(env, "--target", str(other), "--patches", str(mine), "capture", "cap", check=True)
    assert f"`vllm-patcher --target {other} revert`" in out.stdout, out.stdout
    # a conflicted import's --continue hint too
    bad = tmp_path / "bad.diff"
    bad.write_text(
        _diff(
            MODEL,
            "x\n" + (installed[0] / MODEL).read_text(),
            "y\n" + (installed[0] / MODEL).read_text(),
        )
    )
    proc = _cli(env, *args, "import", "conf", "--diff", str(bad))
    assert proc.returncode == 17, proc.stderr
    assert f"`vllm-patcher --target {site} --patches {mine} import conf --continue`" in proc.stdout


def _diff(rel: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )


def test_record_of_the_test_install_lists_the_edited_files(installed) -> None:  # type: ignore[no-untyped-def]
    """The fixture's tree is what the tests above assume: RECORD lists the files they edit."""
    record = record_of(installed[0])
    assert {SPEC, MODEL, LOAD, "vllm/__init__.py"} <= set(record)
    assert all((installed[0] / rel).is_file() for rel in record if rel.startswith("vllm/"))
