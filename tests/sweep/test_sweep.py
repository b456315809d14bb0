"""payoff sweep's judgement of the cells it measured (no server: the cells are built from
generated scrapes and client results; tests/e2e/test_sweep_engine.py runs real servers): the best
k is a measured paying cell, a cell that is unknown or missing gives no best k, the concurrency
above which no k pays, and the verdict and text that follow from them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from vllm_patcher.cli.render import sweep as render_sweep
from vllm_patcher.load.repeats import merged
from vllm_patcher.payoff import scrape
from vllm_patcher.payoff.analysis import analyse
from vllm_patcher.payoff.window import Window, between
from vllm_patcher.sweep import result as sweep_result
from vllm_patcher.sweep import run as sweep

from ..conftest import assert_refused, run_cli
from ..load.points import point, said
from ..payoff.scrapes import metrics


def _result(
    cells: dict[tuple[int, int], list[float]], ks: list[int], levels: list[int]
) -> sweep_result.SweepResult:
    servers = {
        k: sweep_result.Started(k, Path(f"/logs/k{k}.log"), pid=100 + k, ready_s=30.0) for k in ks
    }
    result = sweep_result.SweepResult(ks, levels, 2, 64, servers, Path("/logs"))
    for (k, c), speedups in cells.items():
        result.cells[(k, c)] = point(c, k, speedups)
    return result


def test_the_best_k_is_the_paying_cell_with_the_highest_measured_speedup() -> None:
    r = _result({(1, 1): [1.2, 1.25], (2, 1): [1.4, 1.45], (3, 1): [1.3, 1.3]}, [0, 1, 2, 3], [1])
    assert r.best(1)[0] == 2
    assert r.verdict().verdict == "pays"
    text = "\n".join(render_sweep.lines(r))
    assert "best k = 2" in text and "set num_speculative_tokens to 2" in text


def test_no_best_k_while_a_cell_that_might_be_better_is_unknown() -> None:
    # k = 2's repeats average 1.32x but fall in two classes: it may be the best, so no k is
    r = _result({(1, 1): [1.10, 1.10], (2, 1): [1.04, 1.60]}, [0, 1, 2], [1])
    k, judged = r.best(1)
    assert k is None and "k = 2 unknown" in said(judged) and "k = 1" in said(judged)
    assert "set num_speculative_tokens" not in "\n".join(render_sweep.lines(r))


def test_where_every_k_was_judged_and_none_pays_the_verdict_is_the_best_class_met() -> None:
    r = _result({(1, 1): [0.8, 0.8], (2, 1): [1.0, 1.0]}, [0, 1, 2], [1])
    assert r.best(1)[0] == 0 and r.verdict().verdict == "break-even"
    text = "\n".join(render_sweep.lines(r))
    assert "no k pays (the best, k = 2: 1.00x per-token, break-even)" in text, text
    two = _result({(1, 1): [0.8, 0.8], (1, 4): [0.97, 0.98]}, [0, 1], [1, 4])
    assert two.verdict().verdict == "break-even"


def test_no_best_k_while_a_cell_is_unknown_or_was_not_run() -> None:
    # k = 2's repeats fall on both sides of the thresholds: unknown, so no k is "best" for certain
    r = _result({(1, 1): [0.8, 0.8], (2, 1): [0.8, 1.3]}, [0, 1, 2], [1])
    assert r.best(1)[0] is None and r.verdict().verdict == "unknown"
    assert "set num_speculative_tokens" not in "\n".join(render_sweep.lines(r))
    missing = _result({(1, 1): [0.8, 0.8]}, [0, 1, 2], [1])  # k = 2 did not start
    assert missing.best(1)[0] is None


def test_where_every_k_loses_the_best_is_no_speculation_and_the_verdict_loses() -> None:
    r = _result({(1, 1): [0.8, 0.82], (2, 1): [0.7, 0.72]}, [0, 1, 2], [1])
    assert r.best(1)[0] == 0 and r.verdict().verdict == "loses"
    assert "no k pays" in "\n".join(render_sweep.lines(r))


def test_the_concurrency_above_which_no_k_pays() -> None:
    r = _result(
        {(1, 1): [1.3, 1.3], (1, 4): [1.2, 1.2], (1, 16): [0.8, 0.8],
         (2, 1): [1.5, 1.5], (2, 4): [1.1, 1.1], (2, 16): [0.7, 0.7]},
        [0, 1, 2], [1, 4, 16],
    )  # fmt: skip
    assert [r.best(c)[0] for c in (1, 4, 16)] == [2, 1, 0]
    assert r.no_k_pays_above == 4
    data = r.to_dict()
    assert data["best_k"] == {"1": 2, "4": 1, "16": 0} and data["no_k_pays_above"] == 4
    assert "no k pays above concurrency 4" in "\n".join(render_sweep.lines(r))


def test_a_server_that_did_not_start_is_named_with_its_signal_and_log() -> None:
    r = _result({(1, 1): [1.3, 1.3]}, [0, 1, 2], [1])
    r.servers[2].ready_s = None
    r.servers[2].failure = sweep.server.StartFailure(
        "the server killed by SIGILL before it was ready", -4, Path("/logs/k2.log"),
        ("Fatal Python error: Illegal instruction",),
    )  # fmt: skip
    text = "\n".join(render_sweep.lines(r))
    assert "k = 2: not measured" in text and "SIGILL" in text and "/logs/k2.log" in text
    assert r.to_dict()["servers"][2]["failure"]["signal"] == "SIGILL"  # type: ignore[index]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--url", "3"], "give K=URL"),
        (["--url", "x=http://h:1"], "give K=URL"),
        (["--url", "1=ftp://h"], "'ftp://h' is not an http:// or https:// URL"),
        (["--url", "0=http://a:1", "--url", "2=http://a:1/"], "for two k"),
        (["--url", "0=http://a:1", "--url", "0=http://b:1"], "k = 0 twice"),
        (["--url", "0=http://a:1", "--", "/m/t"], "not both"),
        (["--url", "0=http://a:1", "--k", "0,1"], "drop --k"),
        (["--k", "1,2", "--", "/m/t"], "must include 0"),
        (
            ["--k", "0,64,65", "--", "/m/t"],
            "--k 65: the acceptance per position is read for positions 0 to 63, so k goes up to 64",
        ),
        (["--k", "0,x", "--", "/m/t"], "give integers"),
        (["--", "/m/t", "--speculative-config", "{bad"], "not JSON"),
        (["--client-args", "'unclosed", "--", "/m/t"], "--client-args"),
        (["--client-args", "--max-concurrency 8", "--", "/m/t"], "payoff sweep sets it"),
        (["--client-args", "--base-url=http://x:1", "--", "/m/t"], "payoff sweep sets it"),
        (["--client-args", "--max_concurrency 64", "--", "/m/t"], "payoff sweep sets it"),
        (["--client-args", "--num-p 999", "--", "/m/t"], "payoff sweep sets it"),
        (["--url", "3=http://a:1"], "needs 0=URL"),
        (["--url", "0=http://a:1"], "at least one K=URL"),
        (["--ready-timeout", "nan", "--", "/m/t"], "--ready-timeout"),
        (["--ready-timeout", "inf", "--", "/m/t"], "--ready-timeout"),
    ],
)
def test_a_sweep_it_cannot_run_is_refused_in_one_line_before_anything_starts(
    argv: list[str], said: str
) -> None:
    assert_refused(run_cli("payoff", "sweep", *argv), 2, said)


@pytest.mark.parametrize(
    ("given", "ours"),
    [
        (("--tokenizer", "/t"), False),
        (("--tokenizer=/t",), False),
        (("--tokenizer-mode", "hf"), True),  # another option: the served model's tokenizer added
        (("--tokenizer_mode=hf",), True),
        (("--tokenizer-m", "hf"), True),  # a prefix of --tokenizer-mode alone
        (("--tok", "/t"), True),  # either of the two to the client's parser: refused there
        (("--random-input-len", "8"), True),
    ],
)
def test_the_client_gets_the_served_model_s_tokenizer_unless_the_user_gave_one(
    given: tuple[str, ...], ours: bool
) -> None:
    """The user's client arguments read as vllm bench serve's parser reads them (0.15.1's, run
    on each: --tokenizer-m is --tokenizer-mode; --tok is ambiguous), through serving.args'
    option_name like every other option spelling."""
    from vllm_patcher.serving.args import parse

    plan = sweep.plan([0, 1], [1], 1, 8, "random", given, None, 60.0)
    argv = plan.client_args(parse(["/m", "--tokenizer", "/served-t"]))
    assert argv == (("--tokenizer", "/served-t", *given) if ours else given)


def test_the_global_options_may_follow_the_sweep_and_its_refusal_names_the_sweep() -> None:
    proc = run_cli("payoff", "sweep", "--json", "--python", "/no/such/venv", "--k", "1,2", "--",
                   "/m/t")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    data = json.loads(proc.stdout)
    assert data["command"] == "payoff sweep" and "must include 0" in data["error"]


def test_a_cell_with_failed_requests_is_never_judged_nor_best() -> None:
    """a server that answered every second request with HTTP 500 gave 'pays' and
    'best k = 2'; the client's completed/failed say so, and the cell is unknown."""
    r = _result({(1, 1): [1.2, 1.25], (2, 1): [1.4, 1.45]}, [0, 1, 2], [1])
    bad = r.cells[(2, 1)]
    bad.runs[0].spec.update({"num_prompts": 64, "completed": 32, "failed": 32})
    judged = bad.judgement()
    assert judged.verdict == "unknown"
    assert judged.reason is not None and said(judged).startswith("32 of 256 requests failed")
    assert r.best(1)[0] is None and r.verdict().verdict == "unknown"
    cell = next(c for c in r.to_dict()["cells"] if c["k"] == 2)  # type: ignore[union-attr]
    assert cell["failed_requests"] == 32 and cell["verdict"] == "unknown"
    # a client that says nothing of failures, but completed fewer than it sent
    r2 = _result({(1, 1): [1.2, 1.25]}, [0, 1], [1])
    r2.cells[(1, 1)].runs[1].base.update({"completed": 60})
    assert r2.cells[(1, 1)].failed_requests() == (4, 256)


def test_a_cell_under_500_drafts_is_labelled_and_never_best() -> None:
    """'best k = 2' came from 1 prompt and 2-4 drafts."""
    r = _result({(1, 1): [1.2, 1.25], (2, 1): [1.4, 1.45]}, [0, 1, 2], [1])
    r.cells[(2, 1)].analysis.drafts = 4
    best, judged = r.best(1)
    assert best is None and judged.reason is not None and "k = 2: under 500 drafts" in said(judged)
    assert r.verdict().verdict == "unknown"
    text = "\n".join(render_sweep.lines(r))
    assert "only 4 drafts: under 500, never the best k" in text
    assert "concurrency 1: no best k: k = 2: under 500 drafts" in text
    cells = {c["k"]: c for c in r.to_dict()["cells"]}  # type: ignore[union-attr]
    assert cells[2]["small_sample"] is True and cells[1]["small_sample"] is False


def _reset_window(drafts_since: float) -> Window:
    """A run's window on a server whose counters were reset during it (a restart): the reading
    after the run is below the one before, so the window is since the reset."""
    long_running = metrics(
        drafts=50_000, per_pos=(25_000.0, 12_500.0), generation=90_000, first_tokens=500,
        itl_sum=900.0, itl_count=90_000, running=2,
    )  # fmt: skip
    accepted = drafts_since * 0.75
    since = metrics(
        drafts=drafts_since, per_pos=(drafts_since / 2, drafts_since / 4),
        generation=drafts_since + accepted + 16, first_tokens=16,
        itl_sum=(drafts_since + accepted) * 0.007, itl_count=drafts_since, running=2,
    )  # fmt: skip
    t = time.time()
    window = between(scrape.parse(long_running, "u", t - 10), scrape.parse(since, "u", t))
    assert window.reset and window.drafts == drafts_since
    return window


@pytest.mark.parametrize(
    ("speedups", "drafts_since"),
    [
        ([1.4], 200.0),  # one run, fewer than 500 drafts since the reset
        ([1.4, 1.45], 5_000.0),  # more drafts since the reset than a run of 64 prompts makes
    ],
)
def test_a_cell_whose_counters_were_reset_in_a_run_says_so_not_too_few_drafts(
    speedups: list[float], drafts_since: float
) -> None:
    r = _result({(1, 1): [1.2, 1.25], (2, 1): speedups}, [0, 1, 2], [1])
    cell = r.cells[(2, 1)]
    cell.runs[-1].window = _reset_window(drafts_since)
    cell.analysis = analyse(merged([run.window for run in cell.runs]))
    assert cell.judgement().verdict == "unknown"
    best, judged = r.best(1)
    assert best is None and judged.verdict == "unknown"
    assert "k = 2: its counters were reset during a run" in said(judged), said(judged)
    assert "under 500" not in said(judged) and "too few" not in said(judged)
    text = "\n".join(render_sweep.lines(r))
    assert "concurrency 1: no best k: k = 2: its counters were reset during a run" in text, text
    assert "under 500" not in text and "too few" not in text, text
    cells = render_sweep.to_dict(r)["cells"]
    assert isinstance(cells, list)
    (reset_cell,) = [c for c in cells if c["k"] == 2]
    assert "counters went down" in reset_cell["unknown_reason"], reset_cell
    assert reset_cell["small_sample"] is False  # its count is since the reset: not a sample
