"""One concurrency's verdict you can trust: a
run cut by a counter reset is not judged, break-even is as wide as the baseline's own spread (never
narrower than 5%), a baseline too noisy settles no class, and the more-prompts hint reads the
widened band. The runs are built by hand (``points``)."""

from __future__ import annotations

import dataclasses

from vllm_patcher.payoff.judge import MARGIN

from .points import point, said


# 6. a restart inside a cell
def test_a_cell_cut_by_a_counter_reset_says_so_and_is_not_judged() -> None:
    p = point(1, 2, [1.4, 1.45])
    p.runs[1].window = dataclasses.replace(p.runs[1].window, reset=True)
    judged = p.judgement()
    assert judged.verdict == "unknown" and "restarted under the load" in said(judged)
    assert "1 of 2 run(s)" in said(judged)


# 17. the baseline's own spread widens break-even
def test_a_speedup_inside_the_baselines_own_spread_is_not_called_paying() -> None:
    p = point(1, 2, [1.08, 1.085])
    assert p.judgement().verdict == "pays"
    p.noise = 0.09  # the plain server's runs 9% apart
    assert p.margin == 0.09 and p.judgement().verdict == "break-even"
    assert p.to_dict()["margin"] == 0.09


def test_the_margin_is_never_narrower_than_five_percent() -> None:
    p = point(1, 2, [1.2])
    p.noise = 0.01
    assert p.margin == MARGIN


def test_a_baseline_whose_runs_spread_past_the_cap_settles_no_class() -> None:
    p = point(1, 2, [0.2, 0.5])  # three times slower
    p.noise = 1.0
    judged = p.judgement()
    assert judged.verdict == "unknown" and "100% apart" in said(judged)


def test_the_more_prompts_hint_reads_the_widened_band() -> None:
    from vllm_patcher.payoff.judge import more_needed
    from vllm_patcher.payoff.notes import MorePrompts

    # 1.06x and 1.12x straddle 1.08x: 0.01 of room, 0.03 apart -> 9 times the prompts (with
    # the fixed 5% it would have said about 36, fewer than now)
    needed = more_needed([1.06, 1.12], 64, margin=0.08)
    assert needed == MorePrompts(wanted=576, prompts=64), needed
