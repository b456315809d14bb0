"""vllm_patcher/payoff/analysis.py: payoff's model on windows whose answer is known by hand, and no
verdict where the two servers cannot be compared. Without a baseline the speedup is unknown; servers
under different loads (averaged over the window, or the running gauges of single scrapes), a
baseline of another model, a latency sum that stops growing and a speculative step faster than a
plain one are `unknown` with their reason; positions left from an earlier k and a shorter draft get
no figure, and the advice never tells to change k from one served k."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from vllm_patcher.cli.render.payoff_report import note, wider
from vllm_patcher.payoff import analysis as an
from vllm_patcher.payoff.analysis import Analysis, analyse
from vllm_patcher.payoff.notes import (
    MeasureEachK,
    NeedsBaseline,
    NoBaseline,
    Note,
    SmallSample,
    StepNotLonger,
)
from vllm_patcher.payoff.window import Window

from ..conftest import run_cli
from .scrapes import _no_advice_to_change_k, _pair, _with_baseline, decode, metrics


def _window(drafts: float, per_pos: tuple[float, ...], step_s: float, steps: float) -> Window:
    accepted = sum(per_pos)
    emitted = steps + accepted * steps / drafts  # every step emits 1 + its accepted drafts
    return Window(
        source="spec",
        seconds=10.0,
        since_start=False,
        reset=False,
        k=len(per_pos),
        drafts=drafts,
        draft_tokens=drafts * len(per_pos),
        accepted=accepted,
        per_pos=per_pos,
        generation_tokens=emitted + 4,
        first_tokens=4,
        step_seconds=step_s * steps,
        steps=steps,
    )


def _kinds(a: Analysis) -> list[type[Note]]:
    return [type(n) for n in a.notes]


def _plain(step_s: float, steps: float) -> Window:
    return Window("base", 10.0, False, False, 0, 0, 0, 0, (), steps + 4, 4, step_s * steps, steps)


def test_the_command_line_has_words_for_every_kind_of_note() -> None:
    """A note is an object (one class per kind, its figures its fields); the command line words
    each class the analysis makes, and no other."""
    from vllm_patcher.cli.render.payoff_report import _WORDS

    made = {v for v in vars(an).values() if isinstance(v, type) and issubclass(v, Note)} - {Note}
    assert len(made) == 15 and set(_WORDS) == made, made


def test_a_shorter_draft_gets_a_range_between_the_two_cost_models_never_a_figure() -> None:
    # 100 drafts, k = 3: 80 accept the first token, 40 the first two, 20 all three; the plain
    # server under the same load (one request in flight) made 160 steps of 10 ms in the 1.6 s
    # the speculative one took for 100 steps of 16 ms
    spec = _window(100, (80, 40, 20), step_s=0.016, steps=100)
    a = analyse(spec, _plain(0.010, 160))
    assert a.mean_acceptance_length == pytest.approx(2.4)
    assert a.tokens_per_step == pytest.approx(2.4)
    assert a.prefix == pytest.approx([0.8, 0.4, 0.2])
    assert a.conditional == pytest.approx([0.8, 0.5, 0.5])
    assert a.speedup == pytest.approx(10 * 2.4 / 16)  # measured: per-token time ratio
    assert a.throughput_ratio == pytest.approx(240 / 160)  # measured: tokens per second
    assert a.verdict == "pays" and a.unknown is None
    # k' = 1: 1.8 tokens a step; low end at the same step cost (16 ms), high end at 10 + 2 ms
    assert a.shorter_k_range[1] == pytest.approx((10 * 1.8 / 16, 10 * 1.8 / 12))
    assert a.shorter_k_range[2] == pytest.approx((10 * 2.2 / 16, 10 * 2.2 / 14))
    assert 3 not in a.shorter_k_range  # the served k is measured, not modelled
    assert a.break_even_length == pytest.approx(1.6)
    # both models above 1.0x: a reason to measure, never advice
    assert MeasureEachK(ks=[1, 2], crossing=False) in a.notes, a.notes
    said = note(a.notes[-1], a.window)
    assert "set num_speculative_tokens" not in said and "payoff sweep" in said


def test_a_range_that_crosses_one_says_to_measure_each_k() -> None:
    # an H200's figures: steps 5.85 ms plain, 10.22 ms at k = 3, 47/23/13% per position
    spec = _window(1000, (470, 230, 130), step_s=0.01022, steps=1000)
    a = analyse(spec, _plain(0.00585, 1747))
    assert a.speedup == pytest.approx(1.047, abs=1e-3) and a.verdict == "break-even"
    low, high = a.shorter_k_range[1]
    assert low == pytest.approx(0.84, abs=0.005) and high == pytest.approx(1.18, abs=0.005)
    (measure,) = [n for n in a.notes if isinstance(n, MeasureEachK)]
    assert measure == MeasureEachK(ks=[1, 2], crossing=True), measure
    said = note(measure, a.window)
    assert "vllm-patcher payoff sweep" in said and "set num_speculative_tokens" not in said


def test_without_a_baseline_the_speedup_is_unknown_and_never_guessed() -> None:
    a = analyse(_window(100, (80, 40, 20), step_s=0.016, steps=100))
    assert a.verdict == "unknown" and a.speedup is None and a.shorter_k_range == {}
    assert a.unknown == NoBaseline() and NeedsBaseline in _kinds(a), a.notes
    assert note(a.unknown, a.window) == "no baseline: the speedup was not measured"
    (need,) = [n for n in a.notes if isinstance(n, NeedsBaseline)]
    assert need == NeedsBaseline(k=3, per_step=pytest.approx(2.4), step_s=pytest.approx(0.016))
    assert "--baseline" in note(need, a.window)


def test_a_plain_step_slower_than_a_speculative_one_fits_no_cost_and_predicts_nothing() -> None:
    """Servers not under the same load: the measured speedup stays, the model is not made up."""
    a = analyse(_window(100, (80, 40, 20), step_s=0.008, steps=100), _plain(0.010, 100))
    assert a.speedup is not None and a.verdict == "unknown"  # no measurement under unequal loads
    assert a.shorter_k_range == {} and a.break_even_length is None
    assert isinstance(a.unknown, StepNotLonger), a.notes
    assert "not under the same load" in note(a.unknown, a.window)


def test_a_small_window_says_its_figures_are_noisy() -> None:
    a = analyse(_window(100, (80, 40, 20), step_s=0.016, steps=100), _plain(0.010, 100))
    assert SmallSample(drafts=100, wanted=500) in a.notes, a.notes
    assert "only 100 drafts" in note(a.notes[0], a.window)
    big = analyse(_window(1000, (800, 400, 200), step_s=0.016, steps=1000), _plain(0.010, 1000))
    assert SmallSample not in _kinds(big)


@pytest.mark.parametrize(
    ("source", "approximate", "wanted"),
    [
        ("http://10.0.0.5:8000", False, "widen --window"),
        ("after.txt", False, "save the two scrapes further apart"),
        ("vllm.log", True, "give a log that covers more traffic"),
    ],
)
def test_the_advice_for_a_longer_window_fits_the_source(
    source: str, approximate: bool, wanted: str
) -> None:
    """--window is a usage error with files: advice for saved scrapes or a log never names it."""
    w = dataclasses.replace(
        _window(100, (80, 40, 20), step_s=0.016, steps=100), source=source, approximate=approximate
    )
    a = analyse(w, _plain(0.010, 100))
    advice = " ".join(note(n, a.window) for n in a.notes)
    assert wider(a.window) == wanted
    assert wanted in advice and ("--window" in advice) == source.startswith("http"), advice


# different loads
def test_servers_under_different_loads_get_unknown_showing_both_loads(tmp_path: Path) -> None:
    # 16 requests decoding, 30 ms steps, 2.4 tokens a step; against 1 request, 10 ms steps
    spec = decode(16 * 333, 0.03, (4000, 2500, 1000), drafts=5328, running=16)
    base = decode(1000, 0.01, running=1)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0, 0)), spec), (metrics(spec=False), base))
    assert data["verdict"] == "unknown" and data["_exit"] == 0, data
    assert "16" in data["unknown_reason"] and "1.0" in data["unknown_reason"], data
    assert data["shorter_k_range"] == {}
    _no_advice_to_change_k(data)


# found by the second attack on payoff: with no window length (one saved scrape each, no
# _created), the requests decoding cannot be averaged, and the running gauges read are the only
# load figure
def test_single_scrapes_under_different_loads_with_no_window_length_get_unknown(
    tmp_path: Path,
) -> None:
    spec = decode(2000, 0.012, (1200, 600), drafts=2000, running=1)
    base = decode(2000, 0.010, running=16)
    s = tmp_path / "s.txt"
    b = tmp_path / "b.txt"
    s.write_text(spec)
    b.write_text(base)
    proc = run_cli("--json", "payoff", "--metrics", str(s), "--baseline", str(b))
    data = json.loads(proc.stdout)
    assert data["verdict"] == "unknown", data
    assert "16.0 on the baseline" in data["unknown_reason"], data


# a baseline of another model
def test_a_baseline_of_another_model_gives_no_verdict(tmp_path: Path) -> None:
    spec = decode(1000, 0.02, (500, 200, 50), drafts=1000)
    base = decode(1000, 0.01, model="Qwen-0.5B")
    data = _with_baseline(
        tmp_path,
        (metrics(per_pos=(0, 0, 0)), spec),
        (metrics(spec=False, model="Qwen-0.5B"), base),
    )
    assert data["verdict"] == "unknown" and "Qwen-0.5B" in data["unknown_reason"], data
    keys = list(data)  # the reason beside the verdict; advice, then the notes it words, last
    assert keys[keys.index("verdict") + 1] == "unknown_reason", keys
    assert keys[keys.index("advice") + 1] == "notes", keys


# a latency _sum that does not grow while its _count does
def test_a_latency_sum_that_does_not_grow_is_unknown_not_a_crash(tmp_path: Path) -> None:
    spec = metrics(drafts=1000, per_pos=(500, 200), generation=2000, itl_sum=0.0, itl_count=1000)
    base = decode(1000, 0.01)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0)), spec), (metrics(spec=False), base))
    assert data["verdict"] == "unknown" and "latency" in data["unknown_reason"], data
    plain = metrics(spec=False, generation=2000, itl_sum=0.0, itl_count=1000)
    spec2 = decode(1000, 0.02, (500, 200), drafts=1000)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0)), spec2), (metrics(spec=False), plain))
    assert data["verdict"] == "unknown" and "latency" in data["unknown_reason"], data


# messages
def test_a_baseline_with_no_latency_samples_is_not_called_no_baseline(tmp_path: Path) -> None:
    spec = metrics(drafts=1000, per_pos=(500, 200), generation=2000)  # no decode samples
    s = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), spec)
    b = _pair(tmp_path, "b", metrics(spec=False), decode(1000, 0.01))
    proc = run_cli("payoff", "--metrics", *s, "--baseline", b[0], "--baseline", b[1])
    assert "no baseline" not in proc.stdout and "latency" in proc.stdout.splitlines()[-1]


def test_positions_left_from_an_earlier_k_give_no_shorter_k_range(tmp_path: Path) -> None:
    # an earlier run at k = 5 left positions 3 and 4; this window drafted 3 tokens a draft
    old = (400, 200, 100, 50, 20)
    first = metrics(drafts=1000, draft_tokens=5000, per_pos=old, generation=3000, itl_sum=20.0,
                    itl_count=2000)  # fmt: skip
    now = (900, 500, 250, 50, 20)
    second = metrics(drafts=2000, draft_tokens=8000, per_pos=now, generation=5000 + 880,
                     first_tokens=10, itl_sum=45.0, itl_count=4000)  # fmt: skip
    data = _with_baseline(tmp_path, (first, second), (metrics(spec=False), decode(2000, 0.01)))
    assert data["shorter_k_range"] == {} and data["draft_tokens_per_draft"] == 3.0, data
    assert any("3.00 draft tokens per draft" in a for a in data["advice"]), data["advice"]
