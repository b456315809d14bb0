"""vllm_patcher/payoff/logline.py: vLLM's SpecDecoding log lines, when no scrape is at hand. A log
of drafts shorter than k (n-gram or suffix drafts) rebuilds the number of drafts from the printed
mean acceptance length, not from the drafted tokens over k. (Each release's own log line is read in
tests/payoff/test_scrape.py, with its other renderings.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import assert_refused, run_cli
from .scrapes import _payoff_json


# --log with drafts shorter than k
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


LINE = (
    "SpecDecoding metrics: Mean acceptance length: 1.50, Accepted throughput: 5.00 tokens/s, "
    "Drafted throughput: 10.00 tokens/s, Accepted: {acc} tokens, Drafted: 100 tokens, "
    "Per-position acceptance rate: 0.500, 0.300, 0.200, Avg Draft acceptance rate: {rate}%\n"
)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_log_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """A FIFO would block the read for ever, /dev/zero would fill the memory."""
    import os

    log = tmp_path / "vllm.log"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero")
    assert_refused(run_cli("payoff", "--log", str(log), timeout=60), 18, "not a regular file")


def test_a_long_log_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """Lines longer than the piece a read takes, around the SpecDecoding lines, change nothing."""
    plain, long = tmp_path / "plain.log", tmp_path / "long.log"
    plain.write_text(LINE.format(acc=50, rate=50.0) * 3)
    long.write_text(("x" * 200_000 + "\n" + LINE.format(acc=50, rate=50.0)) * 3)
    data = _payoff_json("--log", str(long))
    assert data["source"].endswith("(3 log lines)") and data["draft_tokens"] == 300, data
    keys = ("drafts", "draft_tokens", "accepted_tokens", "mean_acceptance_length")
    assert {k: data[k] for k in keys} == {k: _payoff_json("--log", str(plain))[k] for k in keys}


@pytest.mark.parametrize(
    "line",
    [
        LINE.format(acc=-15, rate=50.0),
        LINE.replace("1.50", "inf").format(acc=50, rate=50.0),
        LINE.replace("0.300", "nan").format(acc=50, rate=50.0),
    ],
)
def test_a_line_with_numbers_vllm_never_prints_is_refused_as_such(
    tmp_path: Path, line: str
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(line)
    assert_refused(run_cli("payoff", "--log", str(log)), 18, "would not print")
