"""Property tests (hypothesis) on the real pristine 0.15.1 sources.

* Random edits away from the regions a patch touches: the transform still applies, the edits
  survive byte for byte, the result compiles, and apply + revert restore the edited tree exactly.
* Random corruption of the regions a patch touches: either a clean, compiling result or a clean
  refusal with nothing written; never a crash.
"""

from __future__ import annotations

import difflib
import functools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_patcher.catalogue.model import Catalogue, FileChange
from vllm_patcher.errors import PatcherError
from vllm_patcher.install.locate import locate_in_directory
from vllm_patcher.patching import txn
from vllm_patcher.transforms import Rewrite, codemod
from vllm_patcher.wheels import sources

from ..conftest import CATALOGUE, scratch_tree, snapshot
from ..patching.sites import _rewrite_record

VERSION = "0.15.1"
# the patches with a codemod that 0.15.1 needs, and the files each changes there
CODEMODS = Catalogue(tuple(p for p in CATALOGUE.patches if p.transforms and p.pin(VERSION)))
CHANGES: dict[str, list[FileChange]] = {}  # each file's codemods, in series order
for _patch in CODEMODS.patches:
    _pin = _patch.pin(VERSION)
    for _change in _patch.transforms:
        if _pin is not None and _change.path in _pin.files:
            CHANGES.setdefault(_change.path, []).append(_change)
FILES = sorted(CHANGES)


def _rewrite(rel: str, text: str) -> Rewrite:
    """Every codemod of ``rel`` in series order, as apply runs them."""
    changed = False
    for change in CHANGES[rel]:
        result = codemod.rewrite(change, text, VERSION)
        text, changed = result.source, changed or result.changed
    return Rewrite(text, changed)


MARGIN = 3


@pytest.fixture(autouse=True, scope="module")
def _no_transform_cache() -> Iterator[None]:
    """Random inputs: each would be a transform cache entry that nobody reads again."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_PATCHER_NO_TRANSFORM_CACHE", "1")
        yield


# The pristine sources are read on first use, never at import: collecting the suite fetches nothing.
@functools.cache
def _sources() -> dict[str, str]:
    pristine = sources.fetch_release(VERSION, FILES)
    return {rel: (pristine / rel).read_text() for rel in FILES}


@functools.cache
def _outputs() -> dict[str, str]:
    return {rel: _rewrite(rel, _sources()[rel]).source for rel in FILES}


@functools.cache
def _opcodes(rel: str) -> list[tuple[str, int, int, int, int]]:
    a, b = _sources()[rel].splitlines(True), _outputs()[rel].splitlines(True)
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()


@functools.cache
def _safe_points(rel: str) -> list[tuple[int, int]]:
    """(original line, transformed line) pairs where inserting a line cannot touch a change."""
    lines = _sources()[rel].splitlines(True)
    points = []
    for tag, i1, i2, j1, _ in _opcodes(rel):
        if tag != "equal":
            continue
        for p in range(i1 + MARGIN, i2 - MARGIN):
            if p > 0 and lines[p - 1].rstrip("\n").endswith("\\"):
                continue  # a line inserted after a backslash continuation is not valid Python
            points.append((p, j1 + p - i1))
    return points


@functools.cache
def _touched(rel: str) -> list[int]:
    return sorted(
        {
            i
            for tag, i1, i2, _, _ in _opcodes(rel)
            if tag != "equal"
            for i in range(max(i1 - 1, 0), max(i2, i1 + 1))
        }
    )


comment_text = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\\\r"),
    max_size=30,
)


@st.composite
def edits(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, str]]]:
    rel = draw(st.sampled_from(FILES))
    chosen = draw(st.lists(st.sampled_from(_safe_points(rel)), min_size=1, max_size=6, unique=True))
    texts = [draw(comment_text) for _ in chosen]
    indents = [draw(st.sampled_from(["", "    ", "        "])) for _ in chosen]
    return rel, [
        (p, q, f"{ind}# edit: {t}\n") for (p, q), t, ind in zip(chosen, texts, indents, strict=True)
    ]


def _insert(text: str, at: list[tuple[int, str]]) -> str:
    lines = text.splitlines(True)
    for index, line in sorted(at, reverse=True):
        lines.insert(index, line)
    return "".join(lines)


@settings(max_examples=60, deadline=None)
@given(edits())
def test_edits_outside_touched_regions_survive_the_transform(
    case: tuple[str, list[tuple[int, int, str]]],
) -> None:
    rel, inserts = case
    edited = _insert(_sources()[rel], [(p, line) for p, _, line in inserts])
    result = _rewrite(rel, edited)
    assert result.changed
    assert result.source == _insert(_outputs()[rel], [(q, line) for _, q, line in inserts])
    compile(result.source, rel, "exec")
    assert not _rewrite(rel, result.source).changed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits())
def test_apply_then_revert_restores_an_edited_tree_byte_for_byte(
    case: tuple[str, list[tuple[int, int, str]]],
) -> None:
    rel, inserts = case
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        scratch_tree(VERSION, site, FILES)
        _rewrite_record(
            site, rel, _insert(_sources()[rel], [(p, line) for p, _, line in inserts]).encode()
        )
        before = snapshot(site)
        result = txn.apply(locate_in_directory(str(site), CATALOGUE), CODEMODS)
        assert {e.path for e in result.edits} == set(FILES)
        assert {e.method for e in result.edits if e.path == rel} == {"transform"}
        for other in FILES:
            compile((site / other).read_bytes(), other, "exec")
        txn.revert(locate_in_directory(str(site), CATALOGUE))
        after = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher/")}
        assert after == before


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[str, int, int, str]:
    rel = draw(st.sampled_from(FILES))
    line = draw(st.sampled_from(_touched(rel)))
    text = _sources()[rel].splitlines(True)[line]
    start = draw(st.integers(0, max(len(text) - 1, 0)))
    length = draw(st.integers(0, 12))
    junk = draw(st.sampled_from(["", ",", ")", "(", "x", ":", "  ", "\n", "#", "'"]))
    return rel, line, start, f"{start}:{length}:{junk}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_corrupted_touched_regions_are_patched_cleanly_or_refused_cleanly(
    case: tuple[str, int, int, str],
) -> None:
    rel, line, _, spec = case
    start, length, junk = spec.split(":", 2)
    lines = _sources()[rel].splitlines(True)
    text = lines[line]
    lines[line] = text[: int(start)] + junk + text[int(start) + int(length) :]
    corrupted = "".join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        scratch_tree(VERSION, site, FILES)
        _rewrite_record(site, rel, corrupted.encode())
        before = snapshot(site)
        try:
            txn.apply(locate_in_directory(str(site), CATALOGUE), CODEMODS)
        except PatcherError:
            assert snapshot(site) == before, "a refused apply wrote something"
            return
        for other in FILES:
            compile((site / other).read_bytes(), other, "exec")
