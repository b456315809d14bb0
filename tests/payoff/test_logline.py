"""vllm_patcher/payoff/logline.py: vLLM's SpecDecoding log lines, when no scrape is at hand. A log
of drafts shorter than k (n-gram or suffix drafts) rebuilds the number of drafts from the printed
mean acceptance length, not from the drafted tokens over k. (Each release's own log line is read in
tests/payoff/test_scrape.py, with its other renderings.)"""

from __future__ import annotations

from pathlib import Path

import pytest

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
