"""A patches folder is written one way (``fileops.write_patch_text``): every file of it
(patch.toml, the pin's diff and manifest, a series file) atomically, so a full disk at any of
capture's writes is one refusal with exit 6 and leaves no torn file and no temporary file."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from ..conftest import assert_refused, run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # the interpreter tier collects every file under Python 3.10 too
    import tomli as tomllib

SPEC = "vllm/config/speculative.py"
LIST_0151 = '"kimi_k25"]'  # the line as the built-ins leave it on 0.15.1


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_full_disk_at_any_write_of_capture_leaves_no_torn_or_temporary_patch_file(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    spec = site / SPEC
    spec.write_text(spec.read_text().replace(LIST_0151, '"kimi_k25", "mine"]'))
    index, refused_in_folder = 0, 0
    while True:
        index += 1
        trial, mine = tmp_path / f"site-{index}", tmp_path / f"mine-{index}"
        shutil.copytree(site, trial)
        mine.mkdir()
        proc = run_cli(
            "--target", str(trial), "--patches", str(mine), "capture", "my-fix",
            env={"VLLM_PATCHER_FAULT": f"enospc@write#{index}"},
        )  # fmt: skip
        files = _files(mine)
        assert not [name for name in files if name.rsplit("/", 1)[-1].startswith(".")], files
        for name, data in files.items():  # each file is whole: it parses
            if name.endswith("patch.toml"):
                assert tomllib.loads(data.decode())["name"] == "my-fix"
            elif name.endswith("manifest.json"):
                assert SPEC in json.loads(data)["files"]
        if proc.returncode == 0:
            break
        assert_refused(proc, 6, "no space left on device")
        refused_in_folder += bool(files)
        shutil.rmtree(trial)
    assert {"my-fix/patch.toml", "my-fix/vllm-0.15.1/patch.diff"} <= set(files)
    # the patches folder's own writes were among those refused (not only the state's)
    assert index >= 5 and refused_in_folder >= 3, (index, refused_in_folder)
