"""``payoff bench``: the same load on a speculative server and on a plain one, at several
concurrencies (in ascending order), with vLLM's own benchmark client run in the target
interpreter, each ``--repeat`` times after a warm-up of each server that is not measured; per
concurrency both measures (the per-token time ratio and the output throughput ratio, from the
client, and the per-token time ratio from each server's /metrics difference), their spread over
the repeats, that concurrency's own acceptance, and a verdict only when every figure falls in one
class (``point.Point``, judged by ``payoff.judge``).
``run`` gives the measuring engine (``engine``) both servers at once, so their runs alternate, and
returns a ``BenchResult``, plain data the command line renders."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field

from ..errors import BadSetting, BenchInterrupted, NoDrafts
from ..payoff import scrape
from ..payoff.analysis import analyse
from ..payoff.judge import PAYS, UNKNOWN
from . import engine
from .point import Point, Run
from .repeats import failed_note, merged, noise


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


def check(extra: tuple[str, ...], url: str = "", baseline_url: str = "") -> None:
    """The two servers' URLs (http or https, not the same one) and the user's client arguments
    (after ``--``), refused when they name one the load sets."""
    for given, value in (("URL", url), ("--baseline-url", baseline_url)):
        if value and not scrape.is_url(value):
            raise BadSetting(f"{given} {value!r}: give the server's http:// or https:// URL")
    if url and url.rstrip("/") == baseline_url.rstrip("/"):
        raise BadSetting(
            f"{url} is given as both servers: give the speculative server as URL and the same "
            "model served without speculation as --baseline-url"
        )
    engine.refuse_set_by_the_load(extra, "{} after --", "payoff bench")


def run(
    python: str,
    url: str,
    baseline_url: str,
    concurrencies: list[int],
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...] = (),
    say: engine.Say | None = None,
    repeat: int = 1,
) -> BenchResult:
    """The load at each of ``concurrencies`` (above 0), ``repeat`` times (1 or more: the
    command line's options hold these rules, ``cli/options.py``); Ctrl-C is ``BenchInterrupted``
    once the client's group is stopped."""
    check(extra)
    try:
        with (
            engine.session(python),
            tempfile.TemporaryDirectory(prefix="vllm-patcher-bench-") as tmp,
        ):
            engine.check_client(python, dataset, extra)  # a usage error before any load
            load = engine.Load(python, sorted(set(concurrencies)), repeat, num_prompts, dataset,
                               tmp)  # fmt: skip
            servers = [
                engine.Server("spec", url, extra, count_warm_up=True),
                engine.Server("base", baseline_url, extra),
            ]
            got = engine.measure(load, servers, say, functools.partial(_both, url, baseline_url))
        return _judged(got, load, repeat)
    except KeyboardInterrupt:
        raise BenchInterrupted(
            "interrupted; the load client is stopped, neither server is under its load"
        ) from None


def _judged(got: engine.Measurement, load: engine.Load, repeat: int) -> BenchResult:
    out = BenchResult(repeat=repeat, warm_up_drafts=round(got.warm_up["spec"].drafts))
    for c in load.concurrencies:
        spec, base = got.runs["spec"][c], got.runs["base"][c]
        runs = [
            Run(s.result, b.result, s.window, b.window) for s, b in zip(spec, base, strict=True)
        ]
        window = merged([r.window for r in runs])
        out.points.append(Point(c, runs, analyse(window), load.prompts, base_noise(runs)))
    return out


def base_noise(runs: list[Run]) -> float:
    """The plain server's own spread over the repeats: no speedup inside it is told from 1.0x."""
    return noise([r.base for r in runs])


def _both(url: str, baseline_url: str, got: dict[str, engine.Measured]) -> None:
    """One round's check: the speculative server drafted, the baseline did not."""
    spec, base = got["spec"], got["base"]
    if not spec.window.spec or spec.window.drafts <= 0:
        note = failed_note([spec.result])
        raise NoDrafts(
            f"{url} made no drafts under the benchmark"
            + (note or ": is it the speculative server?")
        )
    if base.window.spec and base.window.drafts > 0:
        raise BadSetting(
            f"the baseline {baseline_url} made drafts under the benchmark: give the same "
            "model served without --speculative-config"
        )
