"""vllm_patcher/payoff/judge.py: verdicts that hold under noise, and what one served k says of a
shorter one. The verdict has a five percent break-even band around parity, and a shorter draft's
range between the two cost models counts each step that made no draft as the one token it emitted
(never the k it measured, and never advice to change k)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_patcher.payoff.judge import verdict

from .scrapes import _no_advice_to_change_k, _with_baseline, decode, metrics


def test_the_verdict_has_a_five_percent_band_around_parity() -> None:
    assert [verdict(s) for s in (1.05, 1.049, 1.0, 0.951, 0.95)] == [
        "pays",
        "break-even",
        "break-even",
        "break-even",
        "loses",
    ]


# steps without a draft
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
