"""payoff sweep you can trust: no verdict between two models or
from a host whose speed moved (the baseline measured again at the end); no best k where the runs
overlap; one k whose counters are not one window is that k's failure. Servers and clients here are
fakes of our own making (real /metrics text, vllm bench serve's result fields): tests/e2e runs the
real ones. One concurrency's own verdict is tested in tests/load/test_point.py, the stall watch in
tests/load/test_stall.py, payoff bench on a signal in tests/load/test_bench.py."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vllm_patcher.cli.render import sweep as render_sweep
from vllm_patcher.load import engine
from vllm_patcher.load.vllm_bench import WARM_UP_PROMPTS
from vllm_patcher.payoff import scrape
from vllm_patcher.payoff.notes import SpeedMoved
from vllm_patcher.sweep import run as sweep

from ..load.points import point, said
from ..load.points import said as reason_of
from ..payoff.scrapes import metrics
from .test_sweep import _result

BASE, SPEC = "http://base:1", "http://spec:1"


BASE, SPEC = "http://base:1", "http://spec:1"


# 2. two servers of different models
def test_a_cell_between_servers_of_different_models_is_unknown_naming_both() -> None:
    r = _result({(1, 1): [1.3, 1.3], (2, 1): [1.4, 1.45]}, [0, 1, 2], [1])
    for run in r.cells[(2, 1)].runs:
        run.base_window = dataclasses.replace(run.base_window, model="Qwen-0.5B")  # type: ignore[arg-type]
    judged = r.cells[(2, 1)].judgement()
    assert judged.verdict == "unknown" and "Qwen-0.5B" in said(judged)
    assert "different models" in said(judged) and r.best(1)[0] is None


# 3. overlapping repeats tie
def test_no_best_k_where_the_paying_cells_runs_overlap_they_tie_and_both_are_named() -> None:
    r = _result({(1, 1): [1.25, 1.34], (2, 1): [1.24, 1.29]}, [0, 1, 2], [1])
    best, judged = r.best(1)
    assert best is None and judged.verdict == "pays" and r.tie(1) == [1, 2]
    assert said(judged).startswith("k = 1 (") and " and k = 2 (" in said(judged)
    assert "tie:" in said(judged)
    assert r.verdict().verdict == "pays" and r.to_dict()["ties"] == {"1": [1, 2]}
    data = render_sweep.to_dict(r)  # the reason in words right after the verdict
    assert list(data)[:2] == ["verdict", "unknown_reason"] and data["unknown_reason"] is None
    text = "\n".join(render_sweep.lines(r))
    assert "set num_speculative_tokens" not in text and "tie" in text
    apart = _result({(1, 1): [1.25, 1.27], (2, 1): [1.40, 1.45]}, [0, 1, 2], [1])
    assert apart.best(1)[0] == 2 and apart.tie(1) == []


def test_one_run_per_cell_says_its_verdict_is_from_one_run() -> None:
    r = _result({(1, 1): [1.3]}, [0, 1], [1])
    r.repeat = 1
    last = render_sweep.lines(r)[-1]
    assert last.startswith("verdict: pays from one run per cell") and "noise" in last


class FakeFleet:
    """Servers by URL for a sweep over --url: their /metrics text and vllm bench serve's result
    fields. The baseline's per-token ms come from ``base_ms`` in order (its runs at the start,
    then the second measurement's); the speculative server is ``speedup`` times faster and
    accepts half its first position. ``engine_moves``: the speculative server's engine label
    changes at its second scrape (its counters are not one window)."""

    def __init__(self, base_ms: list[float], speedup: float, engine_moves: bool = False) -> None:
        self.base_ms, self.speedup, self.engine_moves = list(base_ms), speedup, engine_moves
        self.totals = {BASE: [0.0] * 8, SPEC: [0.0] * 8}
        self.pending: dict[str, list[float]] = {}
        self.scrapes = {BASE: 0, SPEC: 0}

    def client(self, python: str, argv: list[str], *rest: Any) -> dict[str, Any]:
        url = argv[argv.index("--base-url") + 1]
        prompts = int(argv[argv.index("--num-prompts") + 1])
        if prompts == WARM_UP_PROMPTS:
            return {"completed": prompts}
        if url == BASE:
            ms = self.base_ms.pop(0)
            self.pending[url] = [0, 0, 0, 1000, 1016, 16, ms, 1000]
            return {"mean_tpot_ms": ms, "output_throughput": 1000 / ms, "completed": prompts}
        s = self.speedup
        self.pending[url] = [1000, 500, 250, 1000, 1766, 16, 1750 * 0.010 / s, 1000]
        return {"mean_tpot_ms": 10 / s, "output_throughput": 100 * s, "completed": prompts}

    def fetch(self, url: str, timeout: float = 10.0) -> scrape.Reading:
        t = self.totals[url]
        for i, v in enumerate(self.pending.pop(url, [0.0] * 8)):
            t[i] += v
        self.scrapes[url] += 1
        engine = "1" if self.engine_moves and url == SPEC and self.scrapes[url] > 1 else "0"
        text = metrics(
            drafts=t[0], draft_tokens=2 * t[0], per_pos=(t[1], t[2]) if url == SPEC else (),
            generation=t[4], first_tokens=t[5], itl_sum=t[6], itl_count=t[7],
            spec=url == SPEC, engine=engine,
        )  # fmt: skip
        return scrape.parse(text, url, time.time())


def _fake_client(monkeypatch: pytest.MonkeyPatch, client: Any) -> None:
    """The load client replaced, its argument check passed."""
    monkeypatch.setattr(engine, "client", client)
    monkeypatch.setattr(engine, "check_client_args", lambda python, argv: None)


def _sweep(
    monkeypatch: pytest.MonkeyPatch, fleet: FakeFleet, tmp_path: Path, said: list[str]
) -> sweep.SweepResult:
    _fake_client(monkeypatch, fleet.client)
    monkeypatch.setattr(scrape, "fetch", fleet.fetch)
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), tmp_path, 60.0, {0: BASE, 2: SPEC})
    from vllm_patcher.cli.render.events import sweep_lines

    return sweep.run(sys.executable, None, plan, lambda n: said.extend(sweep_lines(n)))


# 5. the host's speed moved between the baseline and the end
def test_a_host_that_slowed_down_during_the_sweep_gives_no_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    said: list[str] = []
    steady = _sweep(monkeypatch, FakeFleet([10.0, 10.1, 10.0, 10.2], 1.4), tmp_path / "a", said)
    assert steady.again is not None and steady.cells[(2, 1)].judgement().verdict == "pays"
    assert steady.best(1)[0] == 2 and any("k = 0 again" in line for line in said)
    slower = _sweep(monkeypatch, FakeFleet([10.0, 10.0, 18.0, 18.0], 1.4), tmp_path / "b", said)
    judged = slower.cells[(2, 1)].judgement()
    assert isinstance(judged.reason, SpeedMoved) and judged.reason.kind == "speed-moved", judged
    assert judged.verdict == "unknown" and "host's speed moved" in reason_of(judged)
    assert "10.00 ms at the start and 18.00 ms at the end" in reason_of(judged)
    assert slower.best(1)[0] is None and slower.verdict().verdict == "unknown"
    assert slower.to_dict()["baseline_end"]["1"]["tpot_ms"] == [18.0, 18.0]  # type: ignore[index]


# 9. one k whose /metrics is not one window
def test_a_k_whose_counters_are_not_one_window_is_that_ks_failure_not_the_sweeps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    said: list[str] = []
    r = _sweep(monkeypatch, FakeFleet([10.0] * 4, 1.4, engine_moves=True), tmp_path, said)
    failure = r.servers[2].failure
    assert failure is not None and "not two readings of one server" in failure.reason
    assert r.servers[0].failure is None and r.cells == {} and r.verdict().verdict == "unknown"


# a second attack
def test_the_best_k_must_beat_every_other_paying_k_not_only_the_runner_up() -> None:
    r = _result(
        {(1, 1): [1.06, 1.52], (2, 1): [1.30, 1.30], (3, 1): [1.50, 1.50]}, [0, 1, 2, 3], [1]
    )
    for run in r.cells[(1, 1)].runs:  # k = 1: the highest throughput of all
        run.spec["output_throughput"] = 160.0
    best, judged = r.best(1)
    assert best is None and r.tie(1) == [1, 3] and judged.verdict == "pays"
    assert "k = 1 (" in said(judged) and "k = 3 (" in said(judged)
    three = _result(
        {(1, 1): [1.30, 1.5], (2, 1): [1.31, 1.5], (3, 1): [1.32, 1.5]}, [0, 1, 2, 3], [1]
    )
    assert three.best(1)[0] is None and three.tie(1) == [1, 2, 3]


def test_a_paying_cell_with_no_client_per_token_figure_is_never_ranked_as_zero() -> None:
    r = _result({(1, 1): [2.0, 2.0], (2, 1): [1.3, 1.3]}, [0, 1, 2], [1])
    for run in r.cells[(1, 1)].runs:
        del run.spec["mean_tpot_ms"]
    assert r.cells[(1, 1)].judgement().verdict == "pays" and r.best(1)[0] is None
    assert r.tie(1) == [1, 2]
    alone = _result({(1, 1): [2.0, 2.0]}, [0, 1], [1])
    for run in alone.cells[(1, 1)].runs:
        del run.spec["mean_tpot_ms"]
    text = "\n".join(render_sweep.lines(alone))
    assert "best k = 1 (2.00x throughput, measured)" in text and "0.00x" not in text


@pytest.mark.parametrize("second", ["failed", "silent", "other model"])
def test_a_second_baseline_that_cannot_stand_for_the_first_gives_no_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, second: str
) -> None:
    fleet = FakeFleet([10.0, 10.0, 10.0, 10.0], 1.4)
    real = fleet.client

    def client(python: str, argv: list[str], *rest: Any) -> dict[str, Any]:
        got = real(python, argv, *rest)
        if (
            argv[argv.index("--base-url") + 1] == BASE
            and not fleet.base_ms[:2]
            and "k0-again" in str(argv)
        ):
            if second == "failed":
                got.update({"num_prompts": 64, "completed": 0, "failed": 64})
            elif second == "silent":
                got.pop("mean_tpot_ms")
        return got

    fleet.client = client  # type: ignore[method-assign]
    if second == "other model":
        base_fetch = fleet.fetch

        def fetch(url: str, timeout: float = 10.0) -> scrape.Reading:
            got = base_fetch(url, timeout)
            late = url == BASE and fleet.scrapes[BASE] > 4
            return dataclasses.replace(got, model="Qwen-0.5B") if late else got

        fleet.fetch = fetch  # type: ignore[method-assign]
    r = _sweep(monkeypatch, fleet, tmp_path, [])
    judged = r.cells[(2, 1)].judgement()
    assert judged.verdict == "unknown" and "not measured again" in said(judged), judged


def test_a_url_that_drafts_when_the_baseline_is_measured_again_fails_that_run_not_the_sweep(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fleet = FakeFleet([10.0] * 4, 1.4)
    _fake_client(monkeypatch, fleet.client)
    monkeypatch.setattr(scrape, "fetch", fleet.fetch)
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), tmp_path, 60.0, {0: BASE, 2: SPEC})
    real = sweep._running_one

    def swapped(python: str, url: str, k: int, *rest: Any) -> Any:
        return real(python, SPEC if rest[-1] == "k0-again" else url, k, *rest)

    monkeypatch.setattr(sweep, "_running_one", swapped)
    r = sweep.run(sys.executable, None, plan, lambda _: None)
    assert r.again is not None and r.again.failure is not None
    assert (
        "no longer 0" in r.again.failure.reason and r.cells[(2, 1)].judgement().verdict == "unknown"
    )
    text = "\n".join(render_sweep.lines(r))
    assert "k = 0 again (end of sweep): not measured" in text and "its log: None" not in text


def test_a_concurrency_without_drafts_is_that_cells_matter_not_the_servers() -> None:
    started = sweep.Started(2, None)
    spec, plain = point(1, 2, [1.4]).runs[0].window, point(1, 2, [1.4]).runs[0].base_window
    started.runs = {1: [sweep.Measured({}, spec)], 4: [sweep.Measured({}, plain)]}
    assert sweep._served_k(started) == {2}


def test_a_sweep_of_running_servers_makes_no_log_folder_unless_one_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--url starts no server, so there is no log to keep: every such sweep used to leave an empty
    vllm-patcher-sweep-* folder in the system's temp, named nowhere after a refusal."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fleet = FakeFleet([10.0] * 4, 1.4)
    _fake_client(monkeypatch, fleet.client)
    monkeypatch.setattr(scrape, "fetch", fleet.fetch)
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), None, 60.0, {0: BASE, 2: SPEC})
    result = sweep.run(sys.executable, None, plan, lambda _: None)
    assert result.cells[(2, 1)].judgement().verdict == "pays"
    assert list(tmp_path.iterdir()) == [] and result.to_dict()["log_dir"] is None
    given = tmp_path / "logs"
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), given, 60.0, {0: BASE, 2: SPEC})
    assert plan.prepare().log_dir == given and given.is_dir()


def test_a_server_that_fails_under_the_load_is_said_stopped_not_still_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The tryout: "server stopped", then "failed under the load (the server is still running)",
    then "the baseline (k = 0) did not start" of a server that had been ready."""
    import contextlib

    from vllm_patcher.cli.render.events import sweep_lines
    from vllm_patcher.errors import ServerUnreachable
    from vllm_patcher.serving.args import parse

    class Ready:
        url, pid, ready_s = "http://127.0.0.1:9", 4242, 3.0

        def follow(self) -> None: ...

        def exit_note(self) -> tuple[str, int | None]:
            return "is still running", None

    def failing(*_: Any, **__: Any) -> None:
        raise ServerUnreachable("http://127.0.0.1:9 stopped answering")

    monkeypatch.setattr(sweep.server, "running", lambda *_, **__: contextlib.nullcontext(Ready()))
    monkeypatch.setattr(sweep, "_measure", failing)
    _fake_client(monkeypatch, failing)
    args = parse(("/m/t", "--speculative-config", '{"method": "eagle3", "model": "/m/d"}'))
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), tmp_path, 60.0).prepare()
    said: list[str] = []
    result = sweep.run(sys.executable, args, plan, lambda n: said.extend(sweep_lines(n)))
    reason = result.servers[0].failure.reason  # type: ignore[union-attr]
    assert reason == (
        "failed under the load (the server was still running; it is stopped): "
        "http://127.0.0.1:9 stopped answering"
    )
    text = "\n".join(said)
    assert "still running)" not in text and "did not start" not in text, text
    assert "the baseline (k = 0) was not measured" in text and 2 not in result.servers, text


def test_ctrl_c_while_the_cells_are_judged_is_the_sweeps_interruption_naming_its_logs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C after the last load, while the cells are judged, is still the sweep's own
    interruption (its log folder named), not the generic "every file is as it was"."""
    from vllm_patcher.errors import SweepInterrupted

    fleet = FakeFleet([10.0] * 4, 1.4)
    _fake_client(monkeypatch, fleet.client)
    monkeypatch.setattr(scrape, "fetch", fleet.fetch)

    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_judged", interrupted)
    plan = sweep.plan([0, 2], [1], 2, 64, "random", (), tmp_path, 60.0, {0: BASE, 2: SPEC})
    with pytest.raises(SweepInterrupted, match=f"logs in {tmp_path}"):
        sweep.run(sys.executable, None, plan, lambda _: None)
    prepared = plan.prepare()
    assert prepared.prepare() is prepared  # prepared once: no second folder
