"""The measuring engine ``payoff bench`` and ``payoff sweep`` both drive: one load loop.

A measurement is a ``Load`` (the concurrencies in ascending order, the repeats, the prompts and
dataset of every run) put on one or more servers (``Server``). Each server is warmed up first
(``WARM_UP_PROMPTS`` at the highest concurrency, in no row; its /metrics window kept apart where
the caller counts what the server drafted there);
then at each concurrency, ``repeat`` times, every server in turn gets one run of vLLM's own
benchmark client between two scrapes of its /metrics (``Measured``). ``payoff bench`` gives it
its two servers at once, so their runs alternate; ``payoff sweep`` gives it each server it
started (or was given), one at a time.

The client's process is one ``session`` for a whole measurement, its checks included
(``serving.client`` says why); ``check_client`` has the client's own parser read the user's
arguments before any load, and ``refuse_set_by_the_load`` refuses one of them that every run sets
itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadSetting
from ..events import ConcurrencyDone, LoadEvent, RunStarting, WarmingUp
from ..payoff import scrape
from ..payoff.window import Window, between
from ..serving import client as load_client
from .stall import Stall
from .vllm_bench import WARM_UP_PROMPTS, check_client_args, client, load_argv, set_by_the_load

Say = Callable[[LoadEvent], None]


@dataclass
class Measured:
    """One run of the load on one server: the client's result and the /metrics window."""

    result: dict[str, Any]
    window: Window


@dataclass(frozen=True)
class Server:
    """One server under the load: ``name`` prefixes its result files (``spec``, ``k3``)."""

    name: str
    url: str
    extra: tuple[str, ...] = ()  # the client's own arguments for this server
    api_key: str | None = None  # the served --api-key, the client's Bearer token
    count_warm_up: bool = False  # its warm-up between two scrapes too (what it drafted there)


@dataclass(frozen=True)
class Load:
    """What every run of a measurement shares; ``workdir`` holds the client's result files."""

    python: str
    concurrencies: Sequence[int]  # ascending
    repeat: int
    prompts: int
    dataset: str
    workdir: str


@dataclass
class Measurement:
    """Per server name: its warm-up's window (where counted), and its runs by concurrency."""

    warm_up: dict[str, Window] = field(default_factory=dict)
    runs: dict[str, dict[int, list[Measured]]] = field(default_factory=dict)


def refuse_set_by_the_load(extra: tuple[str, ...], given: str, who: str) -> None:
    """Refuse the first of the user's client arguments that names one every run sets (after it,
    theirs would silently override it); ``given`` says where it was given, ``{}`` the option."""
    own = set_by_the_load(extra)
    if own is not None:
        raise BadSetting(
            f"{given.format(own)}: {who} sets it itself (--concurrency, --num-prompts, --dataset "
            "and each server's URL); leave it out"
        )


def check_client(python: str, dataset: str, extra: tuple[str, ...]) -> None:
    """The user's client arguments parsed by vllm bench serve's own parser, before any load."""
    check_client_args(python, load_argv("http://127.0.0.1:1", 1, 1, dataset, "/", "x.json", extra))


@contextlib.contextmanager
def session(python: str) -> Iterator[None]:
    """One client process for every check and run inside the block (each run a fork of it)."""
    with load_client.session(python):
        yield


def measure(
    load: Load,
    servers: Sequence[Server],
    say: Say | None = None,
    after_run: Callable[[dict[str, Measured]], None] | None = None,
) -> Measurement:
    """Warm each server up, then run the load on every server at each concurrency, ``repeat``
    times; ``after_run`` sees each round's runs by server name (it may raise to stop)."""
    tell: Say = say or (lambda _: None)
    out = Measurement(runs={s.name: {} for s in servers})
    top = max(load.concurrencies)
    for s in servers:
        tell(WarmingUp(s.url, WARM_UP_PROMPTS))
        if s.count_warm_up:
            out.warm_up[s.name] = _one(load, s, top, WARM_UP_PROMPTS, f"warm-{s.name}").window
        else:
            argv = load_argv(s.url.rstrip("/"), top, WARM_UP_PROMPTS, load.dataset, load.workdir,
                             f"warm-{s.name}.json", s.extra)  # fmt: skip
            client(load.python, argv, s.api_key, Stall(s.url))
    for c in load.concurrencies:
        for r in range(load.repeat):
            tell(RunStarting(c, r + 1, load.repeat))
            got = {s.name: _one(load, s, c, load.prompts, f"{s.name}-c{c}-r{r}") for s in servers}
            for name, m in got.items():
                out.runs[name].setdefault(c, []).append(m)
            if after_run is not None:
                after_run(got)
        tell(ConcurrencyDone(c, load.repeat))
    return out


def _one(load: Load, s: Server, c: int, prompts: int, name: str) -> Measured:
    """One run of the client on ``s`` between two scrapes of its /metrics."""
    url = s.url.rstrip("/")
    argv = load_argv(url, c, prompts, load.dataset, load.workdir, f"{name}.json", s.extra)
    before = scrape.fetch(s.url)
    result = client(load.python, argv, s.api_key, Stall(s.url))
    return Measured(result, between(before, scrape.fetch(s.url)))
