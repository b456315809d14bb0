"""The command line words what the libraries return: every progress event a sweep, a rehearsal,
a load or a wheel fetch passes (``vllm_patcher/events.py``) has its words in
``cli/render/events.py``, and no library words one itself."""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from pathlib import Path

from vllm_patcher import events
from vllm_patcher.cli.render import events as words

PACKAGE = Path(events.__file__).resolve().parent

RENDERERS = {
    events.LoadEvent: words.bench_line,
    events.SweepEvent: words.sweep_lines,
    events.RehearseEvent: words.rehearse_line,
    events.FetchEvent: words.fetch_line,
}
SAMPLE = {int: 3, float: 2.5, str: "x", bool: True, Path: Path("/l"), tuple[str, ...]: ("--port",),
          tuple[int, ...]: (0, 2)}  # fmt: skip


def _classes() -> list[type[events.Event]]:
    return [
        c for c in vars(events).values()
        if isinstance(c, type) and issubclass(c, events.Event) and c is not events.Event
    ]  # fmt: skip


def _sample(cls: type[events.Event]) -> events.Event:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = hints[f.name]
        if isinstance(kind, types.UnionType):  # X | None: an X
            kind = next(k for k in typing.get_args(kind) if k is not type(None))
        values[f.name] = SAMPLE[kind]
    return cls(**values)


def test_every_event_belongs_to_one_group_and_its_group_words_it() -> None:
    """Each event class is in exactly one group, and that group's words for it are filled: a
    class left out of its renderer's ``match`` would give None here."""
    classes = _classes()
    assert len(classes) >= 20  # the scan found them
    for cls in classes:
        groups = [g for g in RENDERERS if cls in typing.get_args(g)]
        assert len(groups) == 1, cls
        said = RENDERERS[groups[0]](_sample(cls))  # type: ignore[operator]
        if cls is events.RunStarting:  # payoff bench says nothing as each run starts
            assert said is None
        else:
            assert said and "{" not in str(said), (cls, said)


def _emitted() -> set[str]:
    """The event classes some library outside ``cli/`` builds."""
    names = {c.__name__ for c in _classes()}
    out = set()
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts or path.name == "events.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in names
            ):
                out.add(node.func.id)
    return out


def test_every_event_is_one_a_library_passes() -> None:
    assert _emitted() == {c.__name__ for c in _classes()}


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


def test_the_words_are_filled_from_the_fields() -> None:
    server = events.ServerNext(2, "starting", 3, 5, 61.4, 40.2)
    assert words.sweep_lines(server) == [
        "k = 2: starting server 3 of 5 (61 s so far, about 40 s to go)"
    ]
    first = events.ServerNext(0, "starting", 1, 5, 0.0, None)
    assert words.sweep_lines(first) == ["k = 0: starting server 1 of 5 (0 s so far)"]
    failed = events.ServerFailed(1, "it made no drafts", Path("/l/k1.log"))
    assert words.sweep_lines(failed) == ["k = 1: it made no drafts; its log: /l/k1.log"]
    phase = events.PhaseReached("KV cache sized", 12.2, "4096")
    assert words.rehearse_line(phase) == "KV cache sized after 12 s (4096 tokens)"
    fetched = events.Fetched(12, "0.15.1", 1_234_567, 13, 2.04, "range")
    assert (
        words.fetch_line(fetched)
        == "fetched 12 files of vllm-0.15.1: 1.2 MB in 13 requests, 2.0 s (range)"
    )
    whole = events.NoRanges("example.org", 0)
    assert words.fetch_line(whole) == (
        "example.org does not answer range requests; downloading the whole wheel instead"
    )
    measured = events.ConcurrencyDone(4, 3)
    assert words.bench_line(measured) == "concurrency 4 measured (3 run(s))"
    warming = events.WarmingUp("http://127.0.0.1:8000", 4)
    assert words.bench_line(warming) == (
        "warming http://127.0.0.1:8000 up (4 prompts, not measured)"
    )
    opening = events.SweepOpening(True, ("--port",), (0, 2), (1, 4), 2, 64, Path("/logs"))
    assert words.sweep_lines(opening) == [
        "--port ignored: its servers listen on 127.0.0.1 and a free port",
        "3 servers to start, one model load each (k = 0, 2, then k = 0 again: did the host's "
        "speed hold?); on each, 2 x 64 prompts at concurrency 1, 4 after a warm-up: 12 measured "
        "runs in all; logs in /logs",
    ]


def test_what_revert_leaves_is_worded_by_whether_copies_may_be_there(tmp_path: Path) -> None:
    from vllm_patcher.cli.render.patching import left_in_place
    from vllm_patcher.patching.journal import LeftInPlace

    only_lock = left_in_place(LeftInPlace(tmp_path, copies=False))
    assert only_lock.startswith(f"left in place: {tmp_path} (only the lock file now)")
    copies = left_in_place(LeftInPlace(tmp_path, copies=True))
    assert "move them out" in copies and "only the lock" not in copies
