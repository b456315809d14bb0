"""Every ``unknown`` verdict says why: ``payoff`` (no baseline included), each ``payoff bench``
point, ``payoff sweep`` and each of its cells give a non-null ``unknown_reason`` with it, and the
output schema refuses an ``unknown`` verdict whose ``unknown_reason`` is null. The windows are built
by hand (any figures a window can hold), the bench and sweep results from generated scrapes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_patcher.cli import outcomes
from vllm_patcher.cli.render import payoff as render_payoff
from vllm_patcher.cli.render import sweep as render_sweep
from vllm_patcher.cli.render.payoff_report import to_dict
from vllm_patcher.load.bench import BenchResult
from vllm_patcher.payoff.analysis import analyse
from vllm_patcher.payoff.window import Window

from ..conftest import REPO
from ..load.points import point
from ..sweep.test_sweep import _result
from .scrapes import _pair, _payoff_json, decode, metrics

SCHEMA = json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _envelope(command: str, code: int, data: dict[str, Any]) -> dict[str, Any]:
    return {"schema": "vllm-patcher/1", "command": command, "ok": code == 0, "exit_code": code,
            **data}  # fmt: skip


def test_payoff_without_a_baseline_says_why_its_verdict_is_unknown(tmp_path: Path) -> None:
    spec = decode(1000, 0.02, (500, 200), drafts=1000)
    data = _payoff_json("--metrics", *_pair(tmp_path, "s", metrics(per_pos=(0, 0)), spec))
    assert data["verdict"] == "unknown" and data["speedup"] is None, data
    assert data["unknown_reason"] is not None and "no baseline" in data["unknown_reason"], data
    assert "no-baseline" in [n["kind"] for n in data["notes"]], data["notes"]


@st.composite
def _windows(draw: st.DrawFn, spec: bool) -> Window:
    """A window a server's counters can give: drafts (a speculative one has some), decode steps
    and their time (either may be missing), a length or none, a model name, requests running."""
    k = draw(st.integers(1, 4)) if spec else 0
    drafts = float(draw(st.integers(1, 5000))) if spec else 0.0
    per_pos: list[float] = []
    for _ in range(k):
        per_pos.append(float(draw(st.integers(0, int(per_pos[-1] if per_pos else drafts)))))
    steps = float(draw(st.integers(0, 5000)))
    step_s = draw(st.sampled_from([0.0, 0.008, 0.010, 0.016, 0.03]))
    emitted = steps + sum(per_pos)
    return Window(
        source=draw(st.sampled_from(["http://127.0.0.1:8000", "after.txt"])),
        seconds=draw(st.sampled_from([None, 2.0, 10.0, 60.0])),
        since_start=False,
        reset=False,
        k=k,
        drafts=drafts,
        draft_tokens=drafts * k,
        accepted=sum(per_pos),
        per_pos=tuple(per_pos),
        generation_tokens=emitted + 4,
        first_tokens=4,
        step_seconds=step_s * steps,
        steps=steps,
        running=draw(st.sampled_from([None, 1.0, 4.0, 16.0])),
        spec=spec,
        model=draw(st.sampled_from(["m", "m", "other", ""])),
    )


@settings(max_examples=300, deadline=None)
@given(spec=_windows(True), baseline=st.none() | _windows(False))
def test_every_unknown_verdict_of_payoff_has_its_reason(
    spec: Window, baseline: Window | None
) -> None:
    a = analyse(spec, baseline)
    data = to_dict(a)
    if data["verdict"] == "unknown":
        assert isinstance(data["unknown_reason"], str) and data["unknown_reason"], data
    else:
        assert data["unknown_reason"] is None, data
    VALIDATOR.validate(_envelope("payoff", outcomes.verdict(a.verdict), data))


def _unknown_everywhere() -> list[tuple[str, dict[str, Any], list[list[str | int]]]]:
    """A real answer of each command with an unknown verdict, valid as it is, and where in it an
    unknown verdict's ``unknown_reason`` sits (a path of keys and indexes)."""
    plain = Window("base", 10.0, False, False, 0, 0, 0, 0, (), 1004, 4, 10.0, 1000, model="other")
    spec = decode(1000, 0.02, (500, 200), drafts=1000)
    from vllm_patcher.payoff import scrape
    from vllm_patcher.payoff.window import between

    first = scrape.parse(metrics(per_pos=(0, 0)), "s", 1000.0)
    a = analyse(between(first, scrape.parse(spec, "s", 1010.0)), plain)
    report = _envelope("payoff", outcomes.verdict(a.verdict), to_dict(a))
    result = BenchResult(points=[point(1, 2, [1.02, 1.4])], repeat=2)  # repeats disagree
    bench = render_payoff.bench(result)
    assert bench.data is not None
    sweep_result = _result({(1, 1): [1.0, 1.4]}, [0, 1], [1])
    sweep = render_sweep.to_dict(sweep_result)
    code = outcomes.sweep(sweep_result.verdict().verdict, False)
    return [
        ("payoff", report, [["unknown_reason"]]),
        ("payoff bench", _envelope("payoff bench", bench.code, bench.data),
         [["points", 0, "unknown_reason"]]),
        ("payoff sweep", _envelope("payoff sweep", code, sweep),
         [["unknown_reason"], ["cells", 0, "unknown_reason"]]),
    ]  # fmt: skip


def test_the_schema_refuses_an_unknown_verdict_without_its_reason() -> None:
    for command, answer, paths in _unknown_everywhere():
        VALIDATOR.validate(answer)
        for path in paths:
            where: Any = answer
            for key in path[:-1]:
                where = where[key]
            assert where["verdict"] == "unknown" and where[path[-1]], (command, path, where)
            broken = copy.deepcopy(answer)
            target: Any = broken
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = None
            assert not VALIDATOR.is_valid(broken), f"{command}: {path} null was accepted"
