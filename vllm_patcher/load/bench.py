"""``payoff bench``: the same load on a speculative server and on a plain one, at several
concurrencies (in ascending order), with vLLM's own benchmark client run in the target
interpreter, each ``--repeat`` times after a warm-up of each server that is not measured; per
concurrency both measures (the per-token time ratio and the output throughput ratio, from the
client, and the per-token time ratio from each server's /metrics difference), their spread over
the repeats, that concurrency's own acceptance, and a verdict only when every figure falls in one
class (``point.Point``, judged by ``payoff.judge``).
``run`` drives it and returns a ``BenchResult``, plain data the command line renders."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadSetting, NoDrafts
from ..payoff import scrape
from ..payoff.analysis import analyse
from ..payoff.judge import PAYS, UNKNOWN
from ..payoff.window import Window, between
from ..progress import Reached
from ..serving import client as load_client
from .point import Point, Run
from .repeats import failed_note, merged, noise
from .stall import Stall
from .vllm_bench import WARM_UP_PROMPTS, check_client_args, client, load_argv, set_by_the_load


@dataclass
class BenchResult:
    points: list[Point] = field(default_factory=list)
    repeat: int = 1
    warm_up_drafts: int = 0  # the speculative server's drafts in its warm-up: in no row

    def verdicts(self) -> list[tuple[int, str]]:
        return [(p.concurrency, p.judgement().verdict) for p in self.points]

    @property
    def pays_at(self) -> list[int]:
        return [c for c, v in self.verdicts() if v == PAYS]

    @property
    def stops_paying_above(self) -> int | None:
        """The highest concurrency that paid, when every one below it paid too and every one
        above it measured break-even or a loss (an unknown row above says nothing)."""
        rows = self.verdicts()
        paying = self.pays_at
        if not paying or len(paying) == len(rows):
            return None
        if [v for _, v in rows[: len(paying)]] != [PAYS] * len(paying):
            return None
        if any(v == UNKNOWN for _, v in rows[len(paying) :]):
            return None
        return paying[-1]

    def to_dict(self) -> dict[str, object]:
        return {
            "points": [p.to_dict() for p in self.points],
            "repeat": self.repeat,
            "pays_at": self.pays_at,
            "stops_paying_above": self.stops_paying_above,
            "warm_up_drafts": self.warm_up_drafts,
        }


def check(extra: tuple[str, ...]) -> None:
    """The user's client arguments (after ``--``) refused when they name one the load sets for
    every run: after it, theirs would silently override it."""
    own = set_by_the_load(extra)
    if own is not None:
        raise BadSetting(
            f"{own} after --: payoff bench sets it itself (--concurrency, --num-prompts, "
            "--dataset; the two servers' URLs); leave it out"
        )


def run(
    python: str,
    url: str,
    baseline_url: str,
    concurrencies: list[int],
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...] = (),
    say: Callable[[Reached], None] | None = None,
    repeat: int = 1,
) -> BenchResult:
    """The load at each of ``concurrencies`` (above 0), ``repeat`` times (1 or more: the
    command line's options hold these rules, ``cli/options.py``)."""
    check(extra)
    out = BenchResult(repeat=repeat)
    # each run a process of its own, forked from one client (serving.client says why)
    with (
        load_client.session(python),
        tempfile.TemporaryDirectory(prefix="vllm-patcher-bench-") as tmp,
    ):
        # parsed by vllm bench serve's own parser before any load: a usage error first
        check_client_args(
            python, load_argv("http://127.0.0.1:1", 1, 1, dataset, "/", "x.json", extra)
        )
        levels = sorted(set(concurrencies))  # ascending, whatever order they were given in
        for name, server_url in (("spec", url), ("base", baseline_url)):
            if say is not None:
                say(Reached("warming", {"url": server_url, "prompts": WARM_UP_PROMPTS}))
            argv = load_argv(server_url.rstrip("/"), levels[-1], WARM_UP_PROMPTS, dataset, tmp,
                             f"warm-{name}.json", extra)  # fmt: skip
            before = scrape.fetch(server_url)
            client(python, argv, watch=Stall(server_url))
            if name == "spec":  # what it drafted there is in no row's window
                out.warm_up_drafts = round(between(before, scrape.fetch(server_url)).drafts)
        for c in levels:
            runs = [
                _one_run(python, url, baseline_url, c, num_prompts, dataset, extra, tmp, r)
                for r in range(repeat)
            ]
            window = merged([r.window for r in runs])
            out.points.append(Point(c, runs, analyse(window), num_prompts, base_noise(runs)))
            if say is not None:
                say(Reached("measured", {"c": c, "repeat": repeat}))
    return out


def base_noise(runs: list[Run]) -> float:
    """The plain server's own spread over the repeats: no speedup inside it is told from 1.0x."""
    return noise([r.base for r in runs])


def _one_run(
    python: str,
    url: str,
    baseline_url: str,
    c: int,
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...],
    tmp: str,
    repeat: int,
) -> Run:
    results: dict[str, dict[str, Any]] = {}
    windows: dict[str, Window] = {}
    for side, base_url in (("spec", url), ("base", baseline_url)):
        before = scrape.fetch(base_url)
        argv = load_argv(
            base_url.rstrip("/"), c, num_prompts, dataset, tmp, f"{side}-{c}-{repeat}.json", extra
        )
        results[side] = client(python, argv, watch=Stall(base_url))
        windows[side] = between(before, scrape.fetch(base_url))
    if not windows["spec"].spec or windows["spec"].drafts <= 0:
        note = failed_note([results["spec"]])
        raise NoDrafts(
            f"{url} made no drafts under the benchmark"
            + (note or ": is it the speculative server?")
        )
    if windows["base"].spec and windows["base"].drafts > 0:
        raise BadSetting(
            f"the baseline {baseline_url} made drafts under the benchmark: give the same "
            "model served without --speculative-config"
        )
    return Run(results["spec"], results["base"], windows["spec"], windows["base"])
