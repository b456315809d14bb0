"""The fifteen defects an attack on payoff found (issue 27), each on generated scrapes, log lines
or a local HTTP server: a false verdict is now `unknown` with its reason, a crash the documented
exit code with one line."""

from __future__ import annotations

import gzip
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from vllm_patcher.errors import ServerUnreachable
from vllm_patcher.payoff import scrape

from ..conftest import REPO, assert_refused, run_cli
from .scrapes import decode, growing, http_server, metrics, save

SCHEMA = json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())


def _payoff_json(*args: str) -> dict[str, Any]:
    proc = run_cli("--json", "payoff", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    data["_exit"] = proc.returncode
    return data


def _pair(tmp: Path, name: str, first: str, second: str, t0: float = 1000.0) -> list[str]:
    return [
        str(save(tmp / f"{name}1.txt", first, t0)),
        str(save(tmp / f"{name}2.txt", second, t0 + 10)),
    ]


def _with_baseline(tmp: Path, spec: tuple[str, str], base: tuple[str, str]) -> dict[str, Any]:
    s = _pair(tmp, "s", *spec)
    b = _pair(tmp, "b", *base)
    return _payoff_json("--metrics", *s, "--baseline", b[0], "--baseline", b[1])


def _no_advice_to_change_k(data: dict[str, Any]) -> None:
    text = " ".join(data.get("advice", []))
    assert "set num_speculative_tokens" not in text and "best_k" not in data, data


# 1. different loads
def test_servers_under_different_loads_get_unknown_showing_both_loads(tmp_path: Path) -> None:
    # 16 requests decoding, 30 ms steps, 2.4 tokens a step; against 1 request, 10 ms steps
    spec = decode(16 * 333, 0.03, (4000, 2500, 1000), drafts=5328, running=16)
    base = decode(1000, 0.01, running=1)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0, 0)), spec), (metrics(spec=False), base))
    assert data["verdict"] == "unknown" and data["_exit"] == 0, data
    assert "16" in data["unknown_reason"] and "1.0" in data["unknown_reason"], data
    assert data["shorter_k_range"] == {}
    _no_advice_to_change_k(data)


# 2. a baseline of another model
def test_a_baseline_of_another_model_gives_no_verdict(tmp_path: Path) -> None:
    spec = decode(1000, 0.02, (500, 200, 50), drafts=1000)
    base = decode(1000, 0.01, model="Qwen-0.5B")
    data = _with_baseline(
        tmp_path,
        (metrics(per_pos=(0, 0, 0)), spec),
        (metrics(spec=False, model="Qwen-0.5B"), base),
    )
    assert data["verdict"] == "unknown" and "Qwen-0.5B" in data["unknown_reason"], data


# 3. steps without a draft
def test_steps_without_a_draft_count_as_one_token_in_the_shorter_k_range(tmp_path: Path) -> None:
    # 1,000 request-steps, only 500 with a draft; 700 tokens accepted: 1.7 tokens per step
    spec = decode(1000, 0.013, (400, 200, 100), drafts=500)
    base = decode(1000, 0.010)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0, 0)), spec), (metrics(spec=False), base))
    assert data["tokens_per_step"] == pytest.approx(1.7)
    speedup = 0.010 * 1.7 / 0.013
    assert data["speedup"] == pytest.approx(speedup, abs=1e-3)
    assert set(data["shorter_k_range"]) == {"1", "2"}  # never the k it measured
    one = data["shorter_k_range"]["1"]
    assert one["low"] == pytest.approx(speedup * 1.4 / 1.7, abs=1e-3)  # positions 2, 3 dropped
    assert one["high"] == pytest.approx(speedup * 1.4 / 1.7 * 13 / 11, abs=1e-3)  # c = 1 ms
    _no_advice_to_change_k(data)


# 4. two engines behind a load balancer
def test_scrapes_of_two_engines_are_not_one_window_and_no_rate_above_100_is_printed(
    tmp_path: Path,
) -> None:
    first = metrics(drafts=100, per_pos=(50, 20), engine="0")
    second = metrics(drafts=150, per_pos=(140, 120), engine="1")
    files = _pair(tmp_path, "s", first, second)
    assert_refused(run_cli("payoff", "--metrics", *files), 2, "engine")
    # same labels, but a window with more accepted than drafted tokens
    third = metrics(drafts=110, draft_tokens=220, accepted=200, per_pos=(60, 25))
    files = _pair(tmp_path, "t", metrics(drafts=100, per_pos=(50, 20)), third)
    proc = run_cli("payoff", "--metrics", *files)
    assert proc.returncode in (2, 18) and not re.search(r"\b[1-9]\d{2,}\.\d%", proc.stdout)


# 5 and 13. --watch: a pause between failed reads, and it carries on
def test_watch_pauses_between_failed_reads_and_carries_on_through_every_window_error() -> None:
    from vllm_patcher.errors import BadSetting, NoDrafts
    from vllm_patcher.payoff import run
    from vllm_patcher.payoff.analysis import analyse
    from vllm_patcher.payoff.window import NotOneWindow

    good = analyse(__import__("dataclasses").replace(_spec_window(), source="http://x"))
    script: list[Any] = [
        NoDrafts("empty"),
        ServerUnreachable("down"),
        ServerUnreachable("down"),
        NotOneWindow("went down"),
        good,
        KeyboardInterrupt(),
    ]
    calls: list[str] = []

    def fake_once(*_: Any) -> Any:
        calls.append("read")
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    shown: list[Any] = []
    last = run.report(
        "http://x", (), None, 1.0, (), watch=True,
        show=lambda s, refresh=False: shown.append(s) or True,
        once=fake_once, sleep=lambda s: calls.append(f"sleep {s}"),
    )  # fmt: skip
    # four "reading again" lines and one report, the last analysis returned
    assert last is good and len(shown) == 5, shown
    for i, call in enumerate(calls[:-1]):
        if call == "read" and i < 7:  # every failed read is followed by a pause
            assert calls[i + 1].startswith("sleep"), calls
    with pytest.raises(BadSetting):  # a bad option is still refused at once
        run.report(
            None, (), None, 1.0, ("a", "b", "c"), watch=True,
            show=lambda s, refresh=False: True,
        )  # fmt: skip


def _spec_window() -> Any:
    from vllm_patcher.payoff.window import Window

    return Window("s", 10.0, False, False, 2, 1000, 2000, 900, (600, 300), 3000, 10, 40.0, 2000)


# 6. a server that drips its headers
def test_a_server_that_drips_its_headers_is_refused_within_the_deadline() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            if stop.is_set():
                break
            conn.sendall(bytes([byte]))
            time.sleep(0.2)
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    got: list[BaseException] = []

    def read() -> None:
        try:
            scrape.fetch(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=1.0)
        except BaseException as exc:  # noqa: BLE001 (what it raised is the result)
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    stop.set()
    server.close()
    assert got and isinstance(got[0], ServerUnreachable), got


# 7. a latency _sum that does not grow while its _count does
def test_a_latency_sum_that_does_not_grow_is_unknown_not_a_crash(tmp_path: Path) -> None:
    spec = metrics(drafts=1000, per_pos=(500, 200), generation=2000, itl_sum=0.0, itl_count=1000)
    base = decode(1000, 0.01)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0)), spec), (metrics(spec=False), base))
    assert data["verdict"] == "unknown" and "latency" in data["unknown_reason"], data
    plain = metrics(spec=False, generation=2000, itl_sum=0.0, itl_count=1000)
    spec2 = decode(1000, 0.02, (500, 200), drafts=1000)
    data = _with_baseline(tmp_path, (metrics(per_pos=(0, 0)), spec2), (metrics(spec=False), plain))
    assert data["verdict"] == "unknown" and "latency" in data["unknown_reason"], data


# 8 and 13. --watch with stdout closed, and piped into head
@pytest.mark.parametrize("shell", ["{cmd} >&-", "{cmd} | head -2"])
def test_watch_stops_cleanly_when_nobody_reads_its_output(shell: str) -> None:
    with http_server(growing) as url:
        cmd = f"{sys.executable} -m vllm_patcher payoff {url} --watch --window 0.2"
        proc = subprocess.run(
            ["bash", "-c", "set -o pipefail; " + shell.format(cmd=cmd)],
            capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        )  # fmt: skip
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr


# 9. concurrencies not in ascending order: see test_bench.py


# 10. --log with drafts shorter than k
def test_a_log_of_short_drafts_reads_the_printed_mean_length(tmp_path: Path) -> None:
    line = (
        "INFO 12-01 09:00:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
        "1.09, Accepted throughput: 5.40 tokens/s, Drafted throughput: 100.00 tokens/s, "
        "Accepted: 54 tokens, Drafted: 1000 tokens, Per-position acceptance rate: 0.080, 0.008, "
        "0.002, 0.000, 0.000, Avg Draft acceptance rate: 5.4%\n"
    )
    log = tmp_path / "vllm.log"
    log.write_text(line * 10)
    data = _payoff_json("--log", str(log))
    assert data["mean_acceptance_length"] == pytest.approx(1.09, abs=0.006), data
    assert 5600 <= data["drafts"] <= 6400, data


# 11. k is checked against the draft tokens
def test_missing_or_absent_position_series_are_refused(tmp_path: Path) -> None:
    missing = save(
        tmp_path / "m.txt", metrics(drafts=1000, draft_tokens=3000, per_pos=(500, 200)), 1000
    )
    assert_refused(run_cli("payoff", "--metrics", str(missing)), 18, "position")
    none = save(
        tmp_path / "n.txt", metrics(drafts=1000, draft_tokens=3000, accepted=700, per_pos=None), 1
    )
    assert_refused(run_cli("payoff", "--metrics", str(none)), 18, "position")


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


# 12. two models on one /metrics
def test_two_model_names_in_one_scrape_are_refused(tmp_path: Path) -> None:
    text = metrics(drafts=10, per_pos=(5,)) + metrics(drafts=10, per_pos=(5,), model="other")
    path = save(tmp_path / "two.txt", text, 1000)
    assert_refused(run_cli("payoff", "--metrics", str(path)), 18, "other")


# 14. a plot that fails after the report
def test_a_plot_that_fails_while_drawing_prints_one_envelope(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    files = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), decode(1000, 0.02, (500, 200), 1000))
    plot = tmp_path / "x.png"
    plot.symlink_to(tmp_path / "missing" / "x.png")
    proc = run_cli("--json", "payoff", "--metrics", *files, "--plot", str(plot))
    assert proc.stdout.count('"schema"') == 1 and proc.returncode == 6, proc.stdout
    assert "Traceback" not in proc.stderr


# 15. messages
def test_a_baseline_with_no_latency_samples_is_not_called_no_baseline(tmp_path: Path) -> None:
    spec = metrics(drafts=1000, per_pos=(500, 200), generation=2000)  # no decode samples
    s = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), spec)
    b = _pair(tmp_path, "b", metrics(spec=False), decode(1000, 0.01))
    proc = run_cli("payoff", "--metrics", *s, "--baseline", b[0], "--baseline", b[1])
    assert "no baseline" not in proc.stdout and "latency" in proc.stdout.splitlines()[-1]


def test_a_file_after_a_misplaced_metrics_option_is_read_in_the_order_given(
    tmp_path: Path,
) -> None:
    early, late = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), decode(1000, 0.02, (5, 2), 1000))
    data = _payoff_json(early, "--metrics", late)
    # the window between the two scrapes (1000 - 0 drafts, 10 s apart), not the later one alone
    assert (data["_exit"], data["drafts"], data["window_s"]) == (0, 1000, 10.0), data
    assert_refused(run_cli("payoff", late, "--metrics", early), 2, "give the earlier")


def test_equal_modification_times_are_not_called_a_restart(tmp_path: Path) -> None:
    later = save(tmp_path / "a.txt", decode(1000, 0.02, (500, 200), 1000), 1000)
    earlier = save(tmp_path / "b.txt", decode(500, 0.02, (250, 100), 500), 1000)
    proc = run_cli("payoff", "--metrics", str(later), str(earlier))
    assert "restart" not in proc.stdout + proc.stderr, proc.stdout
    assert_refused(proc, 2, "same modification time")


@pytest.mark.parametrize(
    "body",
    [b"<html><body><h1>Welcome to nginx!</h1></body></html>\n", gzip.compress(b"vllm:x 1\n" * 50)],
)
def test_a_body_that_is_not_metrics_is_described_not_pasted(tmp_path: Path, body: bytes) -> None:
    with http_server(lambda n: (200, "text/html", body)) as url:
        proc = run_cli("payoff", url, "--window", "0")
    assert_refused(proc, 18)
    assert "<" not in proc.stderr and "\ufffd" not in proc.stderr and len(proc.stderr) < 300
    path = tmp_path / "page.txt"
    path.write_bytes(body)
    proc = run_cli("payoff", "--metrics", str(path))
    assert_refused(proc, 18)
    assert "<" not in proc.stderr and "\ufffd" not in proc.stderr and len(proc.stderr) < 300


def test_a_file_given_as_the_url_is_told_to_use_metrics(tmp_path: Path) -> None:
    path = save(tmp_path / "file.txt", metrics(drafts=10, per_pos=(5,)), 1000)
    assert_refused(run_cli("payoff", str(path)), 2, "--metrics")


def test_per_position_counts_that_grow_with_position_are_refused(tmp_path: Path) -> None:
    path = save(tmp_path / "p.txt", metrics(drafts=100, per_pos=(10, 50)), 1000)
    proc = run_cli("payoff", "--metrics", str(path))
    assert_refused(proc, 18, "position")
    assert "500" not in proc.stdout


# found by the second attack: with no window length (one saved scrape each, no _created), the
# requests decoding cannot be averaged, and the running gauges read are the only load figure
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
