"""Patches of the user's own: capture from an edit, port to other releases, series on one file,
hostile patch folders. Real pristine trees of real releases; the real command line."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_patcher.install.record import file_hash
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    assert_refused,
    checkout_copy,
    copy_builtins,
    record_of,
    run_cli,
    scratch_tree,
    snapshot,
    touched_match_record,
)

SPEC = "vllm/config/speculative.py"
LIST_0151 = '"kimi_k25"]'  # the line as the built-ins leave it on 0.15.1
# the built-ins that change the allow-list file on 0.15.1, in series order: a patch of one's own
# on that file stacks on all of them
SPEC_STACK = [
    p.name for p in CATALOGUE.patches if (pin := p.pin("0.15.1")) is not None and SPEC in pin.files
]


@pytest.fixture(scope="module")
def catalogue_tree() -> Path:
    """The shared cache's pristine 0.15.1 tree (read only), fetched on first use."""
    return sources.fetch_release("0.15.1", CATALOGUE.all_paths())


def _states(site: Path, *extra: str) -> dict[str, str]:
    out = run_cli("--target", str(site), *extra, "--json", "status", check=True).stdout
    return {p["name"]: p["state"] for p in json.loads(out)["patches"]}


def _captured(tree_copy, tmp_path: Path) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """0.15.1 with the built-ins applied, then a hand edit on the allow-list line that
    eagle3-whitelist and eagle3-minimax-m2 already edit (and eagle3-granite, last in the series,
    edits the condition below it), captured as my-minimax."""
    site = tree_copy("0.15.1")
    mine = tmp_path / "mine"
    mine.mkdir()  # a --patches folder must exist
    run_cli("--target", str(site), "apply", check=True)
    spec = site / SPEC
    text = spec.read_text()
    assert LIST_0151 in text
    spec.write_text(text.replace(LIST_0151, '"kimi_k25", "my_model"]'))
    proc = run_cli(
        "--target", str(site), "--patches", str(mine), "capture", "my-minimax",
        "--releases", ">=0.15.0,<0.20",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return site, mine


def test_capture_stacks_on_the_whitelist_and_behaves_like_a_built_in(
    tree_copy, catalogue_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    site, mine = _captured(tree_copy, tmp_path)
    folder = mine / "my-minimax" / "vllm-0.15.1"
    manifest = json.loads((folder / "manifest.json").read_text())
    below = CATALOGUE.get(SPEC_STACK[-1]).pin("0.15.1")  # type: ignore[union-attr]
    assert below is not None
    # the diff is made on the bytes the built-ins leave, not on pristine: a series on one line
    assert manifest["files"][SPEC]["before"] == below.files[SPEC].after
    assert manifest["files"][SPEC]["after"] == file_hash((site / SPEC).read_bytes())
    patched = (site / SPEC).read_bytes()

    states = _states(site, "--patches", str(mine))
    assert states["my-minimax"] == "applied" and states["eagle3-whitelist"] == "applied"
    st = json.loads(
        run_cli("--target", str(site), "--patches", str(mine), "--json", "status").stdout
    )
    assert {p["name"]: p["origin"] for p in st["patches"]}["my-minimax"] == str(mine)
    # without its folder the record still shows it (and apply keeps it)
    assert _states(site)["my-minimax"] == "applied"

    run_cli("--target", str(site), "--patches", str(mine), "revert", check=True)
    assert all(touched_match_record(site).values())
    assert _states(site, "--patches", str(mine))["my-minimax"] == "pending"

    # apply replays the series from pristine: whitelist, then my-minimax, same bytes as captured
    run_cli("--target", str(site), "--patches", str(mine), "apply", check=True)
    assert (site / SPEC).read_bytes() == patched
    # and `git apply` of the diffs in series order gives those bytes too
    fresh = tmp_path / "fresh"
    shutil.copytree(site, fresh, ignore=shutil.ignore_patterns(".vllm-patcher"))
    run_cli("--target", str(fresh), "revert", check=True)
    for rel in touched_match_record(site):
        (fresh / rel).write_bytes((catalogue_tree / rel).read_bytes())
    for diff in [
        *(
            p.folder / "vllm-0.15.1" / "patch.diff"
            for p in CATALOGUE.patches
            if "0.15.1" in p.pinned_versions
        ),
        folder / "patch.diff",
    ]:
        subprocess.run(["git", "apply", str(diff)], cwd=fresh, check=True)
    assert (fresh / SPEC).read_bytes() == patched
    run_cli("--target", str(site), "revert", check=True)  # reverted from the record alone
    assert all(touched_match_record(site).values())


def test_a_stacked_patch_alone_is_refused_and_nothing_is_written(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site, mine = _captured(tree_copy, tmp_path)
    run_cli("--target", str(site), "--patches", str(mine), "revert", check=True)
    before = snapshot(site)
    proc = run_cli("--target", str(site), "--patches", str(mine), "apply", "my-minimax")
    # the refusal names what it is stacked on (through every level) and the apply that works
    assert_refused(proc, 13, "my-minimax", f"stacked on {', '.join(SPEC_STACK)}")
    assert snapshot(site) == before
    hint = re.search(r"too: `([^`]+)`", proc.stderr)
    assert hint, proc.stderr
    argv = shlex.split(hint.group(1))
    assert argv[0] == "vllm-patcher" and argv[-len(SPEC_STACK) - 1 :] == [
        *SPEC_STACK,
        "my-minimax",
    ]
    run_cli(*argv[1:], check=True)  # pasted as printed
    states = _states(site, "--patches", str(mine))
    # status judges what that apply chose; supports-eagle3 was not chosen: not judged, not applied
    assert states["my-minimax"] == "applied" and states["supports-eagle3"] == "not-chosen"
    out = run_cli("--target", str(site), "--patches", str(mine), "--json", "status", check=True)
    (other,) = [p for p in json.loads(out.stdout)["patches"] if p["name"] == "supports-eagle3"]
    assert other["detail"] == "not chosen for this run or this environment"
    assert_refused(run_cli("--target", str(site), "apply", "no-such-patch"), 2, "no-such-patch")


def test_capture_refusals_write_nothing(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    mine = tmp_path / "mine"
    mine.mkdir()
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "capture", "x"), 2, "--patches")
    proc = run_cli("--target", str(site), "--patches", str(mine), "capture", "x")
    assert_refused(proc, 15, "no file")
    (site / "vllm" / "brand_new.py").write_text("x = 1\n")
    proc = run_cli(
        "--target", str(site), "--patches", str(mine), "capture", "x", "vllm/brand_new.py"
    )
    assert_refused(proc, 15, "new files")
    (site / "vllm" / "brand_new.py").unlink()
    proc = run_cli("--target", str(site), "--patches", str(mine), "capture", "eagle3-whitelist")
    assert_refused(proc, 13, "already exists")
    assert snapshot(site) == before
    assert not any(mine.rglob("*.diff"))


def test_port_merges_cleanly_conflicts_and_continues(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, mine = _captured(tree_copy, tmp_path)
    args = ("--patches", str(mine), "port", "my-minimax")
    assert_refused(run_cli(*args), 2)  # neither --to nor --all
    proc = run_cli(*args, "--to", "0.15.0", "--to", "0.17.1")
    assert proc.returncode == 17, proc.stderr
    # like every exit from 3 up: one error line, naming what was left and what was written
    (error,) = proc.stderr.strip().splitlines()
    assert error.startswith("vllm-patcher: error: my-minimax was not carried to vLLM 0.17.1")
    assert "0.15.0 written" in error
    assert re.search(r"0\.15\.0\s+clean", proc.stdout) and re.search(
        r"0\.17\.1\s+conflict", proc.stdout
    )
    # the hint names the release that conflicted, ready to paste (0.15.0 is done)
    assert f"--patches {mine} port my-minimax --to 0.17.1 --continue`" in proc.stdout, proc.stdout
    assert (mine / "my-minimax" / "vllm-0.15.0" / "patch.diff").is_file()
    assert not (mine / "my-minimax" / "vllm-0.17.1").exists()  # nothing for a conflicted release
    marked = mine / "my-minimax" / "conflicts" / "vllm-0.17.1" / SPEC
    assert "<<<<<<< vllm 0.17.1" in marked.read_text()
    # conflict copies stay out of `git add` of the patches folder
    subprocess.run(["git", "init", "-q", str(mine)], check=True)
    subprocess.run(["git", "-C", str(mine), "add", "."], check=True)
    tracked = subprocess.run(
        ["git", "-C", str(mine), "ls-files"], capture_output=True, text=True, check=True
    ).stdout
    assert "conflicts" not in tracked and "vllm-0.15.0/patch.diff" in tracked
    # on 0.17.1, status says the conflicts are waiting, with a command that reaches the patch
    waiting = json.loads(
        run_cli(
            "--target", str(tree_copy("0.17.1")), "--patches", str(mine), "--json", "status"
        ).stdout
    )
    detail = {p["name"]: p["detail"] for p in waiting["patches"]}["my-minimax"]
    assert f"--patches {mine} port my-minimax --to 0.17.1 --continue" in detail, detail
    assert_refused(run_cli(*args, "--to", "0.17.1", "--continue"), 17, "conflict markers")
    # resolve as a user would: keep 0.17.1's list and add the entry
    text = re.sub(
        r"<<<<<<< [^\n]*\n(.*?)=======\n.*?>>>>>>> [^\n]*\n",
        lambda m: m.group(1).replace('"kimi_k25",\n', '"kimi_k25",\n            "my_model",\n'),
        marked.read_text(),
        flags=re.S,
    )
    marked.write_text(text)
    resolved = marked.read_bytes()
    # a port without --continue would merge again over the resolved copy: refused, nothing lost
    assert_refused(run_cli(*args, "--to", "0.17.1"), 17, "waiting", "--continue")
    assert marked.read_bytes() == resolved
    # apply on 0.17.1 names the command that finishes it (with --continue), as status does
    other = tmp_path / "site-0.17.1-apply"
    scratch_tree("0.17.1", other)
    refused = run_cli("--target", str(other), "--patches", str(mine), "apply")
    said = refused.stdout + refused.stderr
    assert f"--patches {mine} port my-minimax --to 0.17.1 --continue`" in said, said
    run_cli(*args, "--to", "0.17.1", "--continue", check=True)
    assert not (mine / "my-minimax" / "conflicts").exists()

    # the ported diff applies on a real 0.17.1 tree, stacked on the built-ins, and reverts;
    # applying it on top of the built-ins reports only it as applied now
    site = tmp_path / "site-0.17.1-b"
    scratch_tree("0.17.1", site)
    run_cli("--target", str(site), "apply", check=True)
    out = run_cli("--target", str(site), "--patches", str(mine), "apply", check=True).stdout
    now = [line.split()[0] for line in out.splitlines() if "applied now" in line]
    assert now == ["my-minimax"], out
    assert '"my_model",' in (site / SPEC).read_text()
    assert _states(site, "--patches", str(mine))["my-minimax"] == "applied"
    run_cli("--target", str(site), "--patches", str(mine), "revert", check=True)
    assert all(touched_match_record(site).values())


def _patch_folder(root: Path, name: str, toml: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "patch.toml").write_text(
        toml if toml is not None else f'name = "{name}"\nreleases = ">=0.11"\n'
    )
    return folder


def _pin_copy(src_patch: str, dest: Path, version: str = "0.15.1") -> Path:
    patch = CATALOGUE.get(src_patch)
    assert patch is not None
    out = dest / f"vllm-{version}"
    out.mkdir()
    for f in ("patch.diff", "manifest.json"):
        (out / f).write_bytes((patch.folder / f"vllm-{version}" / f).read_bytes())
    return out


@pytest.mark.parametrize(
    "break_it",
    ["clash", "malformed", "outside", "link", "lying-manifest", "bad-specifier"],
)
def test_hostile_patch_folders_are_refused_and_nothing_is_written(
    tree_copy, tmp_path: Path, break_it: str
) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    mine = tmp_path / "mine"
    if break_it == "clash":
        _patch_folder(mine, "eagle3-whitelist")
        fragment = "two patches are named"
    elif break_it == "malformed":
        _patch_folder(mine, "bad", 'name = "bad"\nreleases = [oops\n')
        fragment = "not valid TOML"
    elif break_it == "bad-specifier":
        _patch_folder(mine, "bad", 'name = "bad"\nreleases = "newest please"\n')
        fragment = "not a PEP 440 specifier"
    elif break_it == "outside":
        out = _pin_copy("supports-eagle3", _patch_folder(mine, "evil"))
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["files"]["../../etc/x"] = manifest["files"].popitem()[1]
        (out / "manifest.json").write_text(json.dumps(manifest))
        fragment = "outside vllm/"
    elif break_it == "link":
        folder = _patch_folder(mine, "linked")
        (folder / "checks").mkdir()
        (folder / "checks" / "c.py").symlink_to("/etc/hostname")
        fragment = "symbolic link"
    else:  # the manifest claims a result the diff does not produce
        out = _pin_copy("supports-eagle3", _patch_folder(mine, "liar"))
        manifest = json.loads((out / "manifest.json").read_text())
        for entry in manifest["files"].values():
            entry["after"] = "B" * 43
        (out / "manifest.json").write_text(json.dumps(manifest))
        fragment = "does not match its diff"
    before = snapshot(site)
    for command in ("apply", "status"):
        only = ["liar"] if break_it == "lying-manifest" and command == "apply" else []
        proc = run_cli("--target", str(site), "--patches", str(mine), command, *only)
        if break_it == "lying-manifest" and command == "status":
            continue  # status reads no diff; apply is where the lie is caught
        assert_refused(proc, 13, fragment)
    assert snapshot(site) == before


def test_a_patch_at_its_fixed_in_release_is_upstream(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    mine = tmp_path / "mine"
    _patch_folder(mine, "old-news", 'name = "old-news"\nreleases = ">=0.11"\nfixed_in = "0.15.0"\n')
    _patch_folder(mine, "not-yet", 'name = "not-yet"\nreleases = ">=0.11"\n')
    states = _states(site, "--patches", str(mine))
    assert states["old-news"] == "upstream"
    assert states["not-yet"] == "unported"  # in range, no diff for 0.15.1: not ready, says so
    out = json.loads(
        run_cli("--target", str(site), "--patches", str(mine), "--json", "apply", check=True).stdout
    )
    assert any("not-yet" in n and "port" in n for n in out["notes"])
    assert record_of(site)  # the tree is still a valid install


MINIMAX = "vllm/model_executor/models/minimax_m2.py"


def _upstream_diff(tmp_path: Path) -> Path:
    """A real upstream change: MiniMax-M2's file from vLLM 0.19.1 to 0.20.0 (where upstream added
    EAGLE-3), in `git diff` shape, plus a test file an upstream PR would carry."""
    import difflib

    old = (sources.fetch_release("0.19.1", [MINIMAX]) / MINIMAX).read_text()
    new = (sources.fetch_release("0.20.0", [MINIMAX]) / MINIMAX).read_text()
    body = "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"a/{MINIMAX}", f"b/{MINIMAX}"
        )
    )
    extra = (
        "diff --git a/tests/models/test_minimax.py b/tests/models/test_minimax.py\n"
        "--- a/tests/models/test_minimax.py\n+++ b/tests/models/test_minimax.py\n"
        "@@ -1 +1,2 @@\n import pytest\n+import torch\n"
    )
    path = tmp_path / "upstream.diff"
    path.write_text(f"diff --git a/{MINIMAX} b/{MINIMAX}\n{body}{extra}")
    return path


def test_import_fits_an_upstream_diff_leaves_rejects_and_continues(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    scratch_tree("0.15.1", site, [MINIMAX])
    before = snapshot(site)
    mine = tmp_path / "mine"
    mine.mkdir()
    args = ("--target", str(site), "--patches", str(mine), "import", "mm-eagle")
    proc = run_cli(*args, "--diff", str(_upstream_diff(tmp_path)))
    assert proc.returncode == 17, proc.stderr
    assert "dropped (outside vllm/)" in proc.stdout and "rejected" in proc.stdout
    pending = mine / "mm-eagle" / "conflicts" / "vllm-0.15.1" / MINIMAX
    assert "<<<<<<< vllm 0.15.1" in pending.read_text()
    assert pending.with_name(pending.name + ".rej").read_text().startswith("--- a/")
    assert not (mine / "mm-eagle" / "vllm-0.15.1").exists()
    assert_refused(run_cli(*args, "--continue"), 17, "conflict markers")
    # resolve by keeping the installed side of every rejected hunk
    pending.write_text(
        re.sub(
            r"<<<<<<< [^\n]*\n(.*?)=======\n.*?>>>>>>> [^\n]*\n",
            lambda m: m.group(1),
            pending.read_text(),
            flags=re.S,
        )
    )
    done = run_cli(*args, "--continue", check=True)
    diff = (mine / "mm-eagle" / "vllm-0.15.1" / "patch.diff").read_text()
    assert "+from itertools import islice" in diff  # a hunk that fitted
    assert snapshot(site) == before  # import never writes site-packages
    # its apply hint names every patch below it: eagle3-minimax-m2, and eagle3-whitelist that
    # eagle3-minimax-m2's speculative.py diff is made on; pasted on a whole pristine tree, it works
    hint = re.search(r"`([^`]+)` patches vLLM with it", done.stdout)
    assert hint, done.stdout
    argv = shlex.split(hint.group(1))
    assert argv[-3:] == ["eagle3-whitelist", "eagle3-minimax-m2", "mm-eagle"], argv
    shutil.rmtree(site)
    shutil.copytree(tree_copy("0.15.1"), site)
    run_cli(*argv[1:], check=True)
    assert _states(site, "--patches", str(mine))["mm-eagle"] == "applied"
    assert_refused(run_cli(*args, "--diff", str(tmp_path / "missing.diff")), 2, "cannot read")


def test_the_pristine_cache_is_keyed_by_the_files_asked_for(tmp_path: Path) -> None:
    """A tree cached for the DeepSeek/Kimi files never makes minimax_m2.py look absent."""
    first = sources.fetch_release("0.15.1", [SPEC], cache=tmp_path)
    assert (first / SPEC).is_file() and not (first / MINIMAX).exists()
    again = sources.fetch_release("0.15.1", [SPEC, MINIMAX], cache=tmp_path)
    assert again == first and (again / MINIMAX).is_file() and (again / SPEC).is_file()
    assert not list((tmp_path / "wheels").glob("*.whl"))  # the wheel is not kept


def test_a_built_wheel_of_the_tool_carries_every_patch_folder(tmp_path: Path) -> None:
    """A non-editable install finds the built-ins: patch.toml, series, diffs, manifests, checks."""
    import sys
    import zipfile

    # build from the committed files only (an in-tree build/ may hold stale modules)
    src = checkout_copy(tmp_path / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "wheel").glob("vllm_patcher-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    probe = (
        "import json, vllm_patcher.catalogue.folders as ps; c = ps.load_catalogue(); "
        "print(json.dumps({'root': str(ps.builtin_root()), 'names': list(c.names), "
        "'pins': {p.name: list(p.pinned_versions) for p in c.patches}, "
        "'checks': {p.name: len(p.check_files()) for p in c.patches}}))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); {probe}"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    got = json.loads(proc.stdout)
    assert got["root"].startswith(str(tmp_path / "site"))
    assert got["names"] == list(CATALOGUE.names)
    assert got["pins"] == {p.name: list(p.pinned_versions) for p in CATALOGUE.patches}
    assert got["checks"]["eagle3-minimax-m2"] >= 1


def test_a_port_to_a_release_that_already_holds_the_change_writes_nothing_and_says_so(
    tmp_path: Path,
) -> None:
    """0.24.0's own files hold eagle3-qwen3-next's change: a port there is `already there`,
    writes no empty pin (which would leave the folder unreadable) and widens no releases.
    (eagle3-granite to 0.32.0 was this test's case until its capture changed: the backport's capture is now
    a tensor of its own, upstream's Granite still captures the layer's output itself.)"""
    pins, env = copy_builtins(tmp_path)
    before = snapshot(pins)
    proc = run_cli("port", "eagle3-qwen3-next", "--to", "0.24.0", env=env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert re.search(r"0\.24\.0\s+already there", proc.stdout), proc.stdout
    assert "nothing was written" in proc.stdout
    assert snapshot(pins) == before
    assert run_cli("list", env=env).returncode == 0


def test_a_pasted_hint_works_when_the_path_has_a_space(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "my site"
    shutil.copytree(tree_copy("0.15.1"), site)
    proc = run_cli("--target", str(site), "verify")
    assert proc.returncode == 1
    hint = re.search(r"run `([^`]+)` first", proc.stdout + proc.stderr)
    assert hint, proc.stdout + proc.stderr
    argv = shlex.split(hint.group(1))
    assert argv[0] == "vllm-patcher" and str(site) in argv
    run_cli(*argv[1:], check=True)
    assert set(_states(site).values()) <= {"applied", "not-applicable", "upstream"}
