"""The command line words what the libraries return: every progress point a sweep, a rehearsal,
a load run or a wheel fetch passes (``progress.Reached``) has its template in
``cli/render/reached.py``, and no library words one itself."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from vllm_patcher.cli.render import reached
from vllm_patcher.progress import Reached

PACKAGE = Path(reached.__file__).resolve().parents[2]


def _points(*modules: str) -> set[str]:
    """The ``what`` of every ``Reached("...")`` the modules pass."""
    return {what for module in modules for what in _points_of(module)}


def _points_of(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Reached"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize(
    ("modules", "templates"),
    [
        (("sweep/run.py",), reached.SWEEP),
        (("rehearse/run.py",), reached.REHEARSE),
        (("load/bench.py",), reached.BENCH),
        (("wheels/index.py", "wheels/fetch.py", "wheels/sources.py"), reached.FETCH),
    ],
)
def test_every_point_a_library_reaches_has_its_words(
    modules: tuple[str, ...],
    templates: Mapping,  # type: ignore[type-arg]
) -> None:
    points = _points(*modules)
    assert points  # the scan found the library's calls
    assert points == set(templates), modules


def test_no_library_passes_a_progress_line_of_its_own() -> None:
    """Outside ``cli/``, no function hands a string to the ``progress``/``say`` callback it was
    given: the words are the command line's."""
    callbacks = {"progress", "say"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/") or rel == "progress.py":
            continue
        for func in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            given = {a.arg for a in func.args.args + func.args.kwonlyargs} & callbacks
            offenders += [
                f"{rel}:{node.lineno}"
                for node in ast.walk(func)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in given
                and node.args
                and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
            ]
    assert offenders == []


def test_the_words_are_filled_from_the_facts() -> None:
    server = Reached(
        "server",
        {"k": 2, "what": "starting", "index": 3, "total": 5, "elapsed": 61.4, "left": 40.2},
    )
    assert (
        reached.sweep_line(server)
        == "k = 2: starting server 3 of 5 (61 s so far, about 40 s to go)"
    )
    first = Reached(
        "server", {"k": 0, "what": "starting", "index": 1, "total": 5, "elapsed": 0.0, "left": None}
    )
    assert reached.sweep_line(first) == "k = 0: starting server 1 of 5 (0 s so far)"
    failed = Reached("failed", {"k": 1, "reason": "it made no drafts", "log": Path("/l/k1.log")})
    assert reached.sweep_line(failed) == "k = 1: it made no drafts; its log: /l/k1.log"
    phase = Reached("phase", {"label": "KV cache sized", "elapsed": 12.2, "tokens": 4096})
    assert reached.rehearse_line(phase) == "KV cache sized after 12 s (4096 tokens)"
    fetched = Reached(
        "fetched",
        {"files": 12, "version": "0.15.1", "bytes": 1_234_567, "requests": 13, "seconds": 2.04,
         "method": "range"},
    )  # fmt: skip
    assert (
        reached.fetch_line(fetched)
        == "fetched 12 files of vllm-0.15.1: 1.2 MB in 13 requests, 2.0 s (range)"
    )
    whole = Reached("no ranges", {"host": "example.org", "bytes": 0})
    assert reached.fetch_line(whole) == (
        "example.org does not answer range requests; downloading the whole wheel instead"
    )
    measured = Reached("measured", {"c": 4, "repeat": 3})
    assert reached.bench_line(measured) == "concurrency 4 measured (3 run(s))"
    warming = Reached("warming", {"url": "http://127.0.0.1:8000", "prompts": 4})
    assert reached.bench_line(warming) == (
        "warming http://127.0.0.1:8000 up (4 prompts, not measured)"
    )


def test_what_revert_leaves_is_worded_by_whether_copies_may_be_there(tmp_path: Path) -> None:
    from vllm_patcher.cli.render.patching import left_in_place
    from vllm_patcher.patching.journal import LeftInPlace

    only_lock = left_in_place(LeftInPlace(tmp_path, copies=False))
    assert only_lock.startswith(f"left in place: {tmp_path} (only the lock file now)")
    copies = left_in_place(LeftInPlace(tmp_path, copies=True))
    assert "move them out" in copies and "only the lock" not in copies
