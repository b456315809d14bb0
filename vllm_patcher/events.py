"""Progress events: the points a long run reached, as typed data.

The libraries pass these to the ``say`` callback their caller gives them and never build a line of
text; the command line words each class (``cli/render/events.py``). One small frozen dataclass per
kind, grouped by the run that emits it:

- the measuring engine (``load/engine.py``), which ``payoff bench`` and ``payoff sweep`` drive:
  ``WarmingUp``, ``RunStarting``, ``ConcurrencyDone``;
- a sweep (``sweep/run.py``): ``ServerNext``, ``ServerStarted``, ``ServerReady``, ``Running``,
  ``KRun``, ``ServerStopped``, ``ServerFailed``, ``FailedAgain``, ``NoBaseline``,
  ``BaselineAgain``, ``SweepOpening``;
- a rehearsal (``rehearse/run.py``): ``RehearsalStarted``, ``PhaseReached``, ``RehearsalReady``;
- a wheel fetch (``wheels/``): ``LookingUp``, ``Fetching``, ``NoRanges``, ``Fetched``,
  ``Extracted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class Event:
    """What every progress event is."""


# -- the measuring engine


@dataclass(frozen=True)
class WarmingUp(Event):
    url: str
    prompts: int


@dataclass(frozen=True)
class RunStarting(Event):
    c: int
    run: int  # 1-based
    repeat: int


@dataclass(frozen=True)
class ConcurrencyDone(Event):
    c: int
    repeat: int


LoadEvent = WarmingUp | RunStarting | ConcurrencyDone

# -- a sweep


@dataclass(frozen=True)
class SweepOpening(Event):
    """Checked and about to start: what it will do (its log folder made)."""

    starts: bool  # False: it measures the user's running servers (--url)
    replaced: tuple[str, ...]  # the serve options it sets itself (--host, --port)
    ks: tuple[int, ...]
    concurrencies: tuple[int, ...]
    repeat: int
    prompts: int
    log_dir: Path


@dataclass(frozen=True)
class ServerNext(Event):
    k: int
    what: str  # "starting" or "measuring"
    index: int
    total: int
    elapsed: float
    left: float | None  # seconds, estimated; None before one server was done


@dataclass(frozen=True)
class ServerStarted(Event):
    k: int
    pid: int


@dataclass(frozen=True)
class ServerReady(Event):
    k: int
    seconds: float
    pid: int


@dataclass(frozen=True)
class Running(Event):
    """A server the user runs (``--url``), about to be warmed up."""

    k: int
    url: str


@dataclass(frozen=True)
class KRun(Event):
    k: int
    c: int
    run: int  # 1-based
    repeat: int


@dataclass(frozen=True)
class ServerStopped(Event):
    k: int


@dataclass(frozen=True)
class ServerFailed(Event):
    k: int
    reason: str
    log: Path | None = None


@dataclass(frozen=True)
class FailedAgain(Event):
    """The baseline measured a second time failed."""

    k: int
    reason: str


@dataclass(frozen=True)
class NoBaseline(Event):
    pass


@dataclass(frozen=True)
class BaselineAgain(Event):
    what: str
    total: int
    elapsed: float


SweepEvent = (
    SweepOpening | ServerNext | ServerStarted | ServerReady | Running | KRun | ServerStopped
    | ServerFailed | FailedAgain | NoBaseline | BaselineAgain
)  # fmt: skip

# -- a rehearsal


@dataclass(frozen=True)
class RehearsalStarted(Event):
    pid: int


@dataclass(frozen=True)
class PhaseReached(Event):
    label: str
    elapsed: float
    tokens: str | None = None  # the KV cache size, as the log said it


@dataclass(frozen=True)
class RehearsalReady(Event):
    seconds: float
    completions: int


RehearseEvent = RehearsalStarted | PhaseReached | RehearsalReady

# -- a wheel fetch


@dataclass(frozen=True)
class LookingUp(Event):
    version: str
    host: str


@dataclass(frozen=True)
class Fetching(Event):
    files: int
    version: str
    bytes: int
    host: str


@dataclass(frozen=True)
class NoRanges(Event):
    host: str
    bytes: int | None


@dataclass(frozen=True)
class Fetched(Event):
    files: int
    version: str
    bytes: int
    requests: int
    seconds: float
    method: str


@dataclass(frozen=True)
class Extracted(Event):
    files: int
    version: str
    wheel: str


FetchEvent = LookingUp | Fetching | NoRanges | Fetched | Extracted
