"""transforms/cache.py: a codemod's output comes back from disk only for the very input, codemod
and release it was made from, and an entry that does not hold together is made again."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from vllm_patcher.catalogue.model import FileChange
from vllm_patcher.transforms import Rewrite, cache, codemod

from ..conftest import CATALOGUE


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VLLM_PATCHER_CACHE", str(tmp_path))
    monkeypatch.delenv("VLLM_PATCHER_NO_TRANSFORM_CACHE", raising=False)
    monkeypatch.delenv("VLLM_PATCHER_TRANSFORM_CACHE", raising=False)
    return tmp_path / "transforms"


class Counting:
    def __init__(self, text: str = "out\n", changed: bool = True) -> None:
        self.calls = 0
        self.result = Rewrite(text, changed)

    def __call__(self) -> Rewrite:
        self.calls += 1
        return self.result


def entries(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file())


def test_a_second_call_with_the_same_input_is_answered_from_disk(store: Path) -> None:
    run = Counting("patched ☃\n", changed=False)
    first = cache.cached(run, "src\n", "vllm/a.py", "m:f", "x")
    second = cache.cached(run, "src\n", "vllm/a.py", "m:f", "x")
    assert first == second == Rewrite("patched ☃\n", False)
    assert run.calls == 1
    assert len(entries(store)) == 1


@pytest.mark.parametrize(
    "other",
    [
        ("src2\n", "vllm/a.py", "m:f", "x"),
        ("src\n", "vllm/b.py", "m:f", "x"),
        ("src\n", "vllm/a.py", "m:g", "x"),
        ("src\n", "vllm/a.py", "m:f", "y"),
    ],
)
def test_any_other_input_path_transform_or_release_runs_the_codemod(
    store: Path, other: tuple[str, str, str, str]
) -> None:
    run = Counting()
    cache.cached(run, "src\n", "vllm/a.py", "m:f", "x")
    cache.cached(run, *other)
    assert run.calls == 2


def test_an_entry_that_does_not_match_its_hash_is_made_again(store: Path) -> None:
    run = Counting("good\n")
    cache.cached(run, "src\n", "p.py", "m:f")
    (entry,) = entries(store)
    entry.write_bytes(entry.read_bytes().replace(b"good", b"evil"))
    assert cache.cached(run, "src\n", "p.py", "m:f") == Rewrite("good\n", True)
    assert run.calls == 2
    assert b"good" in entry.read_bytes()  # and the entry is whole again


def test_a_codemod_that_raises_leaves_nothing_behind(store: Path) -> None:
    def boom() -> Rewrite:
        raise ValueError("shape")

    with pytest.raises(ValueError, match="shape"):
        cache.cached(boom, "src\n", "p.py", "m:f")
    assert entries(store) == []


def test_the_cache_can_live_elsewhere(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_PATCHER_TRANSFORM_CACHE", str(tmp_path / "run"))
    cache.cached(Counting(), "src\n", "p.py", "m:f")
    assert entries(store) == [] and len(entries(tmp_path / "run")) == 1


def test_off_or_unwritable_the_codemod_still_answers(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("a file where the folder would be\n")
    run = Counting()
    assert cache.cached(run, "src\n", "p.py", "m:f") == run.result
    assert cache.cached(run, "src\n", "p.py", "m:f") == run.result
    assert run.calls == 2
    store.unlink()
    monkeypatch.setenv("VLLM_PATCHER_NO_TRANSFORM_CACHE", "1")
    cache.cached(run, "src\n", "p.py", "m:f")
    assert run.calls == 3
    assert not store.exists()


def test_a_real_codemod_gives_the_same_bytes_from_the_cache_as_without_it(
    store: Path, pristine_trees: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every codemod of 0.15.1 (the family ones get their family and release in the key)."""
    changes: list[FileChange] = []
    for patch in CATALOGUE.patches:
        pin = patch.pin("0.15.1")
        changes += [c for c in patch.transforms if pin is not None and c.path in pin.files]
    assert any(c.family is not None for c in changes) and any(c.family is None for c in changes)
    tree = pristine_trees["0.15.1"]
    for change in changes:
        source = (tree / change.path).read_text(encoding="utf-8")
        monkeypatch.setenv("VLLM_PATCHER_NO_TRANSFORM_CACHE", "1")
        plain = codemod.rewrite(change, source, "0.15.1")
        monkeypatch.delenv("VLLM_PATCHER_NO_TRANSFORM_CACHE")
        assert codemod.rewrite(change, source, "0.15.1") == plain  # made, then kept
        assert codemod.rewrite(change, source, "0.15.1") == plain  # read back
    assert len(entries(store)) == len(changes)


def test_a_family_codemod_is_keyed_by_its_family_and_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, str]] = []

    def spy(run: object, source: str, path: str, transform: str, extra: str = "") -> Rewrite:
        seen.append((transform, extra))
        return Rewrite(source, False)

    monkeypatch.setattr(cache, "cached", spy)
    family = next(c for p in CATALOGUE.patches for c in p.transforms if c.family is not None)
    plain = next(c for p in CATALOGUE.patches for c in p.transforms if c.family is None)
    codemod.rewrite(family, "x = 1\n", "0.15.1")
    codemod.rewrite(family, "x = 1\n", "0.16.0")
    codemod.rewrite(plain, "x = 1\n", "0.15.1")
    (t1, e1), (t2, e2), (t3, e3) = seen
    assert t1 == t2 == family.transform and e1 != e2
    assert family.family is not None and family.family.name in e1 and "0.15.1" in e1
    assert (t3, e3) == (plain.transform, "")


def test_an_entry_copied_under_another_key_is_no_hit(store: Path) -> None:
    """A whole, valid entry of one file is not the answer for another (helper-35: a copy made
    apply write MiniMax-M2's model file over DeepSeek's)."""
    cache.cached(Counting("minimax\n"), "a\n", "vllm/m.py", "m:f")
    cache.cached(Counting("deepseek\n"), "b\n", "vllm/d.py", "m:f")
    minimax, deepseek = (
        cache.key(s, p, "m:f", "") for s, p in (("a\n", "vllm/m.py"), ("b\n", "vllm/d.py"))
    )
    (store / deepseek[:2] / deepseek).write_bytes((store / minimax[:2] / minimax).read_bytes())
    run = Counting("deepseek\n")
    assert cache.cached(run, "b\n", "vllm/d.py", "m:f") == Rewrite("deepseek\n", True)
    assert run.calls == 1


def test_a_fifo_where_an_entry_would_be_is_a_miss_not_a_hang(store: Path) -> None:
    run = Counting()
    name = cache.key("src\n", "p.py", "m:f", "")
    (store / name[:2]).mkdir(parents=True)
    os.mkfifo(store / name[:2] / name)
    assert cache.cached(run, "src\n", "p.py", "m:f") == run.result and run.calls == 1


def test_entries_are_readable_by_the_group_of_a_shared_cache(store: Path) -> None:
    cache.cached(Counting(), "src\n", "p.py", "m:f")
    (entry,) = entries(store)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o644


def _tool_imports(module: Path) -> set[str]:
    """The tool's modules ``module`` imports by a relative import, as paths under the package."""
    package = Path(cache.__file__).resolve().parent.parent
    here = module.resolve().parent.relative_to(package).parts
    found = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level + 1]
            parts = [*base, *(node.module or "").split(".")]
            path = package.joinpath(*parts)
            for candidate in (path.with_suffix(".py"), path / "__init__.py"):
                if candidate.is_file():
                    found.add(candidate.relative_to(package).as_posix())
    return found


def test_the_digest_covers_every_module_a_codemod_reaches() -> None:
    """Edit any module the codemods import (releases.PEP604_FROM decides a family's type
    syntax) and every key changes: OUTSIDE lists them all, transitively."""
    package = Path(cache.__file__).resolve().parent.parent
    todo = sorted(Path(cache.__file__).resolve().parent.glob("*.py"))
    seen: set[str] = set()
    while todo:
        for rel in _tool_imports(todo.pop()):
            if rel not in seen and not rel.startswith("transforms/"):
                seen.add(rel)
                todo.append(package / rel)
    assert seen - {"fileops.py"} == set(cache.OUTSIDE)  # fileops: the cache's own folder only
