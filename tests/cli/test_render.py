"""The command line words what the libraries return: every progress point a sweep or a
rehearsal passes (``progress.Reached``) has its template in ``cli/render/reached.py``."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from vllm_patcher.cli.render import reached
from vllm_patcher.progress import Reached

PACKAGE = Path(reached.__file__).resolve().parents[2]


def _points(module: str) -> set[str]:
    """The ``what`` of every ``Reached("...")`` the module passes."""
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
    ("module", "templates"),
    [("sweep/run.py", reached.SWEEP), ("rehearse/run.py", reached.REHEARSE)],
)
def test_every_point_a_library_reaches_has_its_words(module: str, templates: Mapping) -> None:  # type: ignore[type-arg]
    points = _points(module)
    assert len(points) >= 3  # the scan found the library's calls
    assert points == set(templates), module


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
