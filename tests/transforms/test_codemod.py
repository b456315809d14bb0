"""vllm_patcher/transforms/codemod.py: a codemod found by the name a patch.toml gives it, and the
names renamed codemods had before (``RENAMED``) still working, with the same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_patcher.catalogue.folders import load_catalogue
from vllm_patcher.catalogue.model import FileChange
from vllm_patcher.transforms import codemod
from vllm_patcher.wheels import sources

from ..conftest import REPO

# patch -> (its codemod's old name, a release it rewrites there)
OLD = {
    "eagle3-whitelist": ("whitelist:rewrite", "0.15.1"),
    "kimi-k25-image-token": ("image_token:rewrite", "0.15.1"),
    "eagle3-qwen3-vl": ("vl_image_token:rewrite", "0.14.1"),
}


def test_every_old_name_resolves_to_a_codemod_of_this_tool() -> None:
    for old, new in codemod.RENAMED.items():
        assert codemod.function(old) is codemod.function(new), old
    builtins = {c.transform for p in load_catalogue().patches for c in p.transforms}
    assert not builtins & set(codemod.RENAMED)  # the built-ins name each codemod by its name now
    assert {old for old, _ in OLD.values()} == set(codemod.RENAMED)


def _with_old_names(tmp_path: Path) -> Path:
    """A copy of the built-ins whose patch.toml files name the codemods as before the rename."""
    copy = tmp_path / "patches"
    shutil.copytree(REPO / "patches", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, (old, _) in OLD.items():
        toml = copy / name / "patch.toml"
        text = toml.read_text(encoding="utf-8")
        new = codemod.RENAMED[old]
        assert text.count(f'codemod = "{new}"') == 1, name
        toml.write_text(text.replace(f'codemod = "{new}"', f'codemod = "{old}"'), encoding="utf-8")
    return copy


@pytest.mark.parametrize("patch", sorted(OLD))
def test_a_patch_folder_naming_an_old_codemod_loads_and_rewrites_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patch: str
) -> None:
    old, version = OLD[patch]
    monkeypatch.setenv("VLLM_PATCHER_PATCHES_DIR", str(_with_old_names(tmp_path)))
    before = load_catalogue().get(patch)
    monkeypatch.delenv("VLLM_PATCHER_PATCHES_DIR")
    now = load_catalogue().get(patch)
    assert before is not None and now is not None
    (was,) = [c for c in before.transforms if c.family is None]
    (change,) = [c for c in now.transforms if c.family is None]
    assert (was.transform, change.transform) == (old, codemod.RENAMED[old])
    assert was._replace(transform=change.transform) == change  # the same change but its name
    source = (sources.fetch_release(version, [change.path]) / change.path).read_text()
    monkeypatch.setenv("VLLM_PATCHER_NO_TRANSFORM_CACHE", "1")  # each name runs its codemod
    by_old, by_new = codemod.rewrite(was, source, version), codemod.rewrite(change, source, version)
    assert by_new.changed and by_old == by_new


def test_a_name_is_resolved_when_its_codemod_runs() -> None:
    """The catalogue keeps the name as written; an unknown one fails where a file goes through it."""
    change = FileChange("vllm/config/speculative.py", "no_such_module:rewrite")
    with pytest.raises(ModuleNotFoundError):
        codemod.rewrite(change, "x = 1\n", "0.15.1")
