"""payoff's model on windows whose answer is known by hand, and its refusals of bad input."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from vllm_patcher.payoff.analysis import analyse, verdict
from vllm_patcher.payoff.window import Window

from ..conftest import assert_refused, run_cli


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


def _plain(step_s: float, steps: float) -> Window:
    return Window("base", 10.0, False, False, 0, 0, 0, 0, (), steps + 4, 4, step_s * steps, steps)


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
    assert a.verdict == "pays" and a.unknown_reason is None
    # k' = 1: 1.8 tokens a step; low end at the same step cost (16 ms), high end at 10 + 2 ms
    assert a.shorter_k_range[1] == pytest.approx((10 * 1.8 / 16, 10 * 1.8 / 12))
    assert a.shorter_k_range[2] == pytest.approx((10 * 2.2 / 16, 10 * 2.2 / 14))
    assert 3 not in a.shorter_k_range  # the served k is measured, not modelled
    assert a.break_even_length == pytest.approx(1.6)
    advice = " ".join(a.advice)  # both models above 1.0x: a reason to measure, never advice
    assert "set num_speculative_tokens" not in advice and "payoff sweep" in advice


def test_a_range_that_crosses_one_says_to_measure_each_k() -> None:
    # the H200 of issue 27: steps 5.85 ms plain, 10.22 ms at k = 3, 47/23/13% per position
    spec = _window(1000, (470, 230, 130), step_s=0.01022, steps=1000)
    a = analyse(spec, _plain(0.00585, 1747))
    assert a.speedup == pytest.approx(1.047, abs=1e-3) and a.verdict == "break-even"
    low, high = a.shorter_k_range[1]
    assert low == pytest.approx(0.84, abs=0.005) and high == pytest.approx(1.18, abs=0.005)
    advice = " ".join(a.advice)
    assert "vllm-patcher payoff sweep" in advice and "set num_speculative_tokens" not in advice


def test_the_verdict_has_a_five_percent_band_around_parity() -> None:
    assert [verdict(s) for s in (1.05, 1.049, 1.0, 0.951, 0.95)] == [
        "pays",
        "break-even",
        "break-even",
        "break-even",
        "loses",
    ]


def test_without_a_baseline_the_speedup_is_unknown_and_never_guessed() -> None:
    a = analyse(_window(100, (80, 40, 20), step_s=0.016, steps=100))
    assert a.verdict == "unknown" and a.speedup is None and a.shorter_k_range == {}
    assert a.unknown_reason is None and any("--baseline" in line for line in a.advice)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((), "needs a server URL"),
        (("http://127.0.0.1:1", "--metrics", "x"), "exactly one of"),
        (("--metrics", "a", "--metrics", "b", "--metrics", "c"), "one saved scrape"),
        (("http://127.0.0.1:1", "--window", "-1"), "--window"),
        (("http://127.0.0.1:1", "--plot", "out.jpg"), ".png"),
        (
            (
                "bench",
                "http://127.0.0.1:1",
                "--baseline-url",
                "http://127.0.0.1:2",
                "--concurrency",
                "x",
            ),
            "--concurrency",
        ),
        (("--log", "x.log", "--baseline", "http://127.0.0.1:2"), "no baseline can be compared"),
        (("--metrics", "a", "--baseline", "http://127.0.0.1:2"), "the same way as the server"),
        (("http://127.0.0.1:1", "--baseline", "b.txt"), "the same way as the server"),
        (("--metrics", "a", "--metrics", "b", "--baseline", "c"), "give the same number"),
        (("--metrics", "a", "--metrics", "b", "--window", "30"), "--window and --watch"),
        (("--metrics", "a", "--watch"), "--window and --watch"),
        (("--log", "x.log", "--window", "5"), "--window and --watch"),
    ],
)
def test_bad_payoff_options_are_usage_errors(args: tuple[str, ...], fragment: str) -> None:
    assert_refused(run_cli("payoff", *args), 2, fragment)


def test_a_file_that_is_not_metrics_is_refused_with_its_own_code(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello world\n")
    assert_refused(run_cli("payoff", "--metrics", str(junk)), 18, "vllm")
    assert_refused(run_cli("payoff", "--metrics", str(tmp_path / "missing.txt")), 18, "cannot read")
    assert_refused(run_cli("payoff", "--log", str(junk)), 19, "SpecDecoding")


def test_a_plain_step_slower_than_a_speculative_one_fits_no_cost_and_predicts_nothing() -> None:
    """Servers not under the same load: the measured speedup stays, the model is not made up."""
    a = analyse(_window(100, (80, 40, 20), step_s=0.008, steps=100), _plain(0.010, 100))
    assert a.speedup is not None and a.verdict == "unknown"  # no measurement under unequal loads
    assert a.shorter_k_range == {} and a.break_even_length is None
    assert any("not under the same load" in line for line in a.advice)


def test_a_small_window_says_its_figures_are_noisy() -> None:
    a = analyse(_window(100, (80, 40, 20), step_s=0.016, steps=100), _plain(0.010, 100))
    assert any("only 100 drafts" in line for line in a.advice)
    big = analyse(_window(1000, (800, 400, 200), step_s=0.016, steps=1000), _plain(0.010, 1000))
    assert not any("noisy" in line for line in big.advice)


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
    advice = " ".join(analyse(w, _plain(0.010, 100)).advice)
    assert wanted in advice and ("--window" in advice) == source.startswith("http"), advice


def _scrape_text(
    drafts: str = "100",
    accepted: str = "60",
    itl_sum: str = "1.0",
    pos: str = "0",
    draft_tokens: str = "300",
) -> str:
    return "\n".join(
        [
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{pos}"}} 50',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 1000',
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10',
            f'vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {itl_sum}',
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 500',
            "",
        ]
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"drafts": "NaN"},
        {"drafts": "+Inf"},
        {"itl_sum": "+Inf"},
        {"itl_sum": "-5"},
        {"accepted": "400"},  # more accepted than drafted
        {"pos": "100000000000"},
        {"pos": "-3"},
    ],
)
def test_counters_no_vllm_server_can_have_are_refused_never_judged(
    tmp_path: Path, bad: dict[str, str]
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(_scrape_text(**bad))
    assert_refused(run_cli("payoff", "--metrics", str(path)), 18)
    assert_refused(run_cli("--json", "payoff", "--metrics", str(path)), 18)


def test_baseline_scrapes_in_the_wrong_order_are_refused_not_read_as_a_restart(
    tmp_path: Path,
) -> None:
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    s1.write_text(_scrape_text(drafts="100"))
    s2.write_text(
        _scrape_text(drafts="200", accepted="120", draft_tokens="600").replace("1000", "2000")
    )
    b1, b2 = tmp_path / "b1.txt", tmp_path / "b2.txt"
    b1.write_text('vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 1.0\n')
    b2.write_text('vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 3.0\n')
    for i, f in enumerate((s1, b1, s2, b2)):  # s1 and b1 saved first, then s2 and b2
        os.utime(f, (1000.0 + 5 * (i // 2), 1000.0 + 5 * (i // 2)))
    swapped = run_cli(
        "payoff", "--metrics", str(s1), str(s2), "--baseline", str(b2), "--baseline", str(b1)
    )
    assert_refused(swapped, 2, f"but {b1} was saved first")
    # saved at the same moment (no order to tell from the files): the counters still tell
    for f in (b1, b2):
        os.utime(f, (1000.0, 1000.0))
    same_time = run_cli(
        "payoff", "--metrics", str(s1), str(s2), "--baseline", str(b2), "--baseline", str(b1)
    )
    assert_refused(same_time, 2, "same modification time")


def test_two_scrapes_of_the_server_given_later_first_are_refused(tmp_path: Path) -> None:
    """Without a baseline too: the later file first would read as a restart and report on the
    earlier scrape alone (27 drafts instead of 860 in the tryout)."""
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    s1.write_text(_scrape_text(drafts="100"))
    s2.write_text(
        _scrape_text(drafts="200", accepted="120", draft_tokens="600").replace("1000", "2000")
    )
    os.utime(s1, (1000.0, 1000.0))
    os.utime(s2, (1005.0, 1005.0))
    forward = run_cli("--json", "payoff", "--metrics", str(s1), str(s2))
    report = json.loads(forward.stdout)
    # read in order: the window between the two scrapes (200 - 100 drafts), not the earlier alone
    assert (forward.returncode, report["drafts"], report["window_s"]) == (0, 100, 5.0), report
    assert_refused(run_cli("payoff", "--metrics", str(s2), str(s1)), 2, "give the earlier")


def test_two_readings_of_different_servers_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(_scrape_text())
    b.write_text(_scrape_text(drafts="200").replace('model_name="m"', 'model_name="other"'))
    assert_refused(
        run_cli("payoff", "--metrics", str(a), str(b)), 2, "not two readings of one server"
    )


def test_a_plot_that_cannot_be_written_is_refused_before_anything_is_measured(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a.txt"
    a.write_text(_scrape_text())
    proc = run_cli(
        "--json", "payoff", "--metrics", str(a), "--plot", str(tmp_path / "no" / "x.png")
    )
    assert proc.returncode == 2 and proc.stdout.count('"schema"') == 1, proc.stdout


@pytest.mark.parametrize("mode", ["garbage", "trickle"])
def test_a_server_that_answers_garbage_or_trickles_is_a_clean_refusal(mode: str) -> None:
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(4096)
            if mode == "garbage":
                conn.sendall(b"\x00\x01 not http at all\r\n\r\n")
            else:  # a valid start, then one byte every second, for ever
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                while not stop.is_set():
                    try:
                        conn.sendall(b"#")
                    except OSError:
                        break
                    time.sleep(1)
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        assert_refused(run_cli("payoff", f"http://127.0.0.1:{port}", "--window", "0"), 18)
    finally:
        stop.set()
        server.close()
