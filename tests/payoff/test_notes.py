"""vllm_patcher/payoff/notes.py: one class per kind of note. Each class's JSON is its kind and then
its declared fields, in their order (an optional figure left out while it is None), floats to 6
significant digits and never a non-finite number; every kind is one class's, named after it, and
the command line has words for every class."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields

from vllm_patcher.cli.render import notes as judgement_words
from vllm_patcher.cli.render import payoff_report
from vllm_patcher.payoff.notes import (
    BaselineNotAgain,
    FiguresDisagree,
    MorePrompts,
    Note,
    RepeatRuns,
)


def _classes(base: type[Note] = Note) -> list[type[Note]]:
    """Every class of note the tool defines (a test's own classes left out)."""
    found = []
    for cls in base.__subclasses__():
        if cls.__module__.startswith("vllm_patcher."):
            found.append(cls)
        found += _classes(cls)
    return found


def test_every_note_writes_its_kind_then_its_declared_fields() -> None:
    classes = _classes()
    assert len(classes) >= 29, classes  # the walk found them
    for cls in classes:
        names = [f.name for f in fields(cls)]
        note = cls(**{name: 1.5 for name in names})
        assert list(note.to_dict()) == ["kind", *names], cls
        assert note.to_dict()["kind"] == cls.kind


def test_every_kind_is_one_class_named_after_it() -> None:
    kinds = [cls.kind for cls in _classes()]
    assert len(kinds) == len(set(kinds)), sorted(kinds)
    for cls in _classes():
        assert cls.__name__ == "".join(w.capitalize() for w in cls.kind.split("-")), cls


def test_the_command_line_words_every_kind_of_note() -> None:
    """A class without words in ``cli/render/notes.py`` (a judgement's reason) or
    ``cli/render/payoff_report.py`` (payoff's report) fails here; a class in both is worded
    twice."""
    judgements, report = set(judgement_words.WORDS), set(payoff_report._WORDS)
    assert judgements & report == set()
    assert judgements | report == set(_classes())


def test_an_optional_figure_is_left_out_while_it_is_none() -> None:
    assert BaselineNotAgain(why="restarted").to_dict() == {
        "kind": "baseline-not-again",
        "why": "restarted",
    }
    assert list(BaselineNotAgain(why="failed-requests", failed=2).to_dict().items()) == [
        ("kind", "baseline-not-again"),
        ("why", "failed-requests"),
        ("failed", 2),
    ]
    disagree = FiguresDisagree(figures={"throughput": [0.9, 1.2]}, margin=0.05)
    assert list(disagree.to_dict()) == ["kind", "figures", "margin"]
    hinted = FiguresDisagree(figures={}, margin=0.05, more=MorePrompts(wanted=9, prompts=4))
    assert hinted.to_dict()["more"] == {"wanted": 9, "prompts": 4}
    assert RepeatRuns().to_dict() == {"repeat": True}


@dataclass(frozen=True, kw_only=True)
class _Inner(Note):
    kind = "inner"
    step_s: float


@dataclass(frozen=True, kw_only=True)
class _Outer(Note):
    kind = "outer"
    center: float
    figures: dict[str, list[float]]
    why: Note
    spread: float
    ks: tuple[int, ...]
    n: int


def test_a_notes_json_keeps_six_significant_digits_and_never_writes_a_non_finite_number() -> None:
    note = _Outer(
        center=1.0466666666666666, figures={"speedup": [1.07, 1 / 3]},
        why=_Inner(step_s=0.000123456789), spread=math.inf, ks=(1, 2), n=7,
    )  # fmt: skip
    data = note.to_dict()
    assert data == {
        "kind": "outer",
        "center": 1.04667,
        "figures": {"speedup": [1.07, 0.333333]},
        "why": {"kind": "inner", "step_s": 0.000123457},
        "spread": None,
        "ks": [1, 2],
        "n": 7,
    }
    json.dumps(data, allow_nan=False)  # a JSON reader other than Python's can read it
