"""What happened between two readings (or since the server started): the counters' differences.

Prometheus counters only grow while the server runs; a counter that went down means the server
restarted (or its metrics were reset) between the readings, and then the later reading alone is
the window, since that restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadSetting
from .scrape import Reading, impossible


class NotOneWindow(BadSetting):
    """Two readings that are not one server's window (another model or engine set, counters
    that went down where no restart can be told, a difference no server can have). Exit 2, as
    every refusal of what was given; ``--watch`` reads again after one."""


@dataclass(frozen=True)
class Window:
    source: str
    seconds: float | None  # None: since start, and the start is not known
    since_start: bool
    reset: bool  # the counters went down between the readings: the later one alone is used
    k: int
    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]
    generation_tokens: float = 0.0
    first_tokens: float = 0.0
    step_seconds: float = 0.0
    steps: float = 0.0
    running: float | None = None  # requests running, averaged over the readings
    approximate: bool = False  # counts rebuilt from rounded log figures
    spec: bool = True
    model: str = ""
    engines: tuple[str, ...] = ()

    @property
    def decoding(self) -> float | None:
        """Requests decoding, on average over the window: the decode steps' time (one sample
        per request and step) over the window's length."""
        if not self.seconds or self.seconds <= 0 or self.steps <= 0:
            return None
        return self.step_seconds / self.seconds

    @property
    def emitted(self) -> float:
        """Tokens emitted by decode steps (each request's first token is the prefill's)."""
        return max(self.generation_tokens - self.first_tokens, 0.0)


_COUNTERS = (
    "drafts",
    "draft_tokens",
    "accepted",
    "generation_tokens",
    "first_tokens",
    "step_seconds",
    "steps",
)


def between(first: Reading | None, last: Reading) -> Window:
    if first is None:
        return _since_start(last)
    if (first.model and last.model and first.model != last.model) or (
        first.k and last.k and first.k != last.k
    ):
        raise NotOneWindow(
            f"{first.source} and {last.source} are not two readings of one server (model "
            f"{first.model or '?'} with k = {first.k}, then {last.model or '?'} with k = {last.k})"
        )
    if first.engines and last.engines and first.engines != last.engines:
        raise NotOneWindow(
            f"{first.source} and {last.source} are not two readings of one server (engine "
            f"{', '.join(first.engines)}, then engine {', '.join(last.engines)}: two servers "
            "behind a load balancer?); scrape each server and read each on its own"
        )
    k = max(first.k, last.k)
    before = tuple(first.per_pos) + (0.0,) * (k - first.k)
    after = tuple(last.per_pos) + (0.0,) * (k - last.k)
    went_down = any(getattr(last, n) < getattr(first, n) for n in _COUNTERS) or any(
        b < a for a, b in zip(before, after, strict=True)
    )
    if went_down and last.at == first.at:
        raise NotOneWindow(
            f"{first.source} and {last.source} have the same modification time, so which was "
            f"saved first is not known, and the counters of {last.source} are lower: give the "
            "earlier scrape first (cp -p keeps a scrape's time)"
        )
    if went_down or (first.created is not None and last.created != first.created):
        return _since_start(last, reset=True)
    window = Window(
        source=last.source,
        seconds=last.at - first.at if last.at > first.at else None,
        since_start=False,
        reset=False,
        k=k,
        per_pos=tuple(b - a for a, b in zip(before, after, strict=True)),
        running=(first.running + last.running) / 2,
        spec=last.spec,
        model=last.model,
        engines=last.engines,
        **{n: getattr(last, n) - getattr(first, n) for n in _COUNTERS},
    )
    problem = impossible(window.drafts, window.draft_tokens, window.accepted, window.per_pos)
    if problem and window.drafts > 0:
        raise NotOneWindow(
            f"the window from {first.source} to {last.source} holds {problem}, which no one "
            "server's counters can: are they two readings of one server?"
        )
    return window


def _since_start(last: Reading, reset: bool = False) -> Window:
    seconds = last.at - last.created if last.created is not None else None
    return Window(
        source=last.source,
        seconds=seconds if seconds is None or seconds >= 0 else None,
        since_start=True,
        reset=reset,
        k=last.k,
        per_pos=last.per_pos,
        running=last.running,
        spec=last.spec,
        model=last.model,
        engines=last.engines,
        **{n: getattr(last, n) for n in _COUNTERS},
    )
