"""One concurrency's runs built by hand for the load's and the sweep's tests: generated scrapes of a
speculative and a plain server, and vllm bench serve's result fields, the speculative server
``speedup`` times faster and accepting half of each draft position."""

from __future__ import annotations

import time
from typing import Any

from vllm_patcher.load.point import Point, Run
from vllm_patcher.payoff import scrape
from vllm_patcher.payoff.analysis import analyse
from vllm_patcher.payoff.window import Window, between

from ..payoff.scrapes import metrics


def window(spec: bool, speedup: float, k: int = 2) -> Window:
    a = 0.5
    per_pos = tuple(1000 * a ** (i + 1) for i in range(k)) if spec else ()
    emitted = 1000 + sum(per_pos)
    after = metrics(
        drafts=1000 if spec else 0, per_pos=per_pos, generation=emitted + 16, first_tokens=16,
        itl_sum=emitted * 0.010 / speedup if spec else 1000 * 0.010, itl_count=1000, running=2,
        spec=spec,
    )  # fmt: skip
    before = metrics(per_pos=(0.0,) * k if spec else (), spec=spec)
    t = time.time()
    return between(scrape.parse(before, "u", t - 10), scrape.parse(after, "u", t))


def point(c: int, k: int, speedups: list[float]) -> Point:
    runs = []
    for s in speedups:
        spec_w, base_w = window(True, s, k), window(False, 1.0)
        runs.append(
            Run(
                {"mean_tpot_ms": 10.0 / s, "output_throughput": 100.0 * s},
                {"mean_tpot_ms": 10.0, "output_throughput": 100.0},
                spec_w,
                base_w,
            )
        )
    return Point(c, runs, analyse(runs[0].window), 64)


def said(judged: Any) -> str:
    """A judgement's reason as the command line words it ("" when it has none)."""
    from vllm_patcher.cli.render.notes import reason

    return "" if judged.reason is None else reason(judged.reason)
