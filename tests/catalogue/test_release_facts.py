"""Release facts have one owner: the patch folders. What the package metadata, the exit codes'
docstrings and the install checks say must agree with them."""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from vllm_patcher import errors
from vllm_patcher.releases import FIRST_PATCHABLE

from ..conftest import CATALOGUE, REPO, assert_refused, run_cli, snapshot

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

SPEC = "vllm/config/speculative.py"


def _last_patched_release_bound() -> Version:
    """Every built-in is upstream at or past its fixed_in: the first release needing none."""
    bounds = [p.fixed_in for p in CATALOGUE.patches]
    assert all(b is not None for b in bounds)
    return max(b for b in bounds if b is not None)


def test_the_target_extra_admits_exactly_the_releases_the_built_ins_patch() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (target,) = project["optional-dependencies"]["target"]
    spec = Requirement(target).specifier
    assert spec.contains(str(FIRST_PATCHABLE))
    assert not spec.contains(str(Version(f"0.{FIRST_PATCHABLE.minor - 1}.99")))
    newest = _last_patched_release_bound()
    assert not spec.contains(str(newest)), (target, newest)
    below = max(v for p in CATALOGUE.patches for v in map(Version, p.pinned_versions))
    assert spec.contains(str(below)), (target, below)
    # the one-line description names the families and no stale release range
    assert "0.11-0.17" not in project["description"]
    assert "MiniMax-M2" in project["description"]


def test_every_error_docstring_names_its_own_exit_code() -> None:
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.PatcherError) and cls.__doc__:
            said = re.match(r"Exit code (\d+)", cls.__doc__)
            if said:
                assert int(said.group(1)) == cls.exit_code, cls.__name__


def _drop_from_record(site: Path, rel: str) -> None:
    record = next(site.glob("vllm-*.dist-info")) / "RECORD"
    rows = [r for r in csv.reader(io.StringIO(record.read_text())) if r and r[0] != rel]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())


def test_a_record_without_the_allow_list_file_is_refused_where_a_patch_still_rewrites_it(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    """0.18.1: the DeepSeek/Kimi patches are upstream, but eagle3-minimax-m2 still rewrites the
    allow-list there, so a RECORD without it is no reference (not a green `not-applicable`)."""
    site = tree_copy("0.18.1")
    _drop_from_record(site, SPEC)
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "status", "--check"), 3, SPEC)
    assert snapshot(site) == before
