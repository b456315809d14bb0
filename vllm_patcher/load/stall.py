"""A load on a server that stopped answering: its /metrics and /health still answer, but no
token moves. ``Stall`` is asked while the load client runs (see ``serving.client.run``'s
``watch``) and names the stall once requests were out (running or waiting) and neither
``generation_tokens`` nor ``prompt_tokens`` moved for ``STALL_S``, so that the client is stopped
within minutes rather than at its own hour. Time with no request out (the client still starting)
does not count; a /metrics that stops answering is said as such."""

from __future__ import annotations

import time

from ..errors import PatcherError
from ..payoff import scrape

STALL_S = 180.0  # requests out and no token, prompt or generated, for this long: stuck
WATCH_EVERY_S = 10.0


class Stall:
    def __init__(self, url: str, stall_s: float | None = None) -> None:
        self.url = url
        self.stall_s = STALL_S if stall_s is None else stall_s
        self.last: tuple[float, float] | None = None
        self.since: float | None = None  # since when requests were out and nothing moved
        self.unanswered = False

    def __call__(self) -> str | None:
        now = time.monotonic()
        try:
            r = scrape.fetch(self.url)
        except PatcherError:  # no answer: no movement either
            self.unanswered = True
            if self.since is None:
                self.since = now
            return self._said(now)
        self.unanswered = False
        moved = (r.generation_tokens, r.prompt_tokens)
        if moved != self.last or r.running + r.waiting <= 0:
            self.last, self.since = moved, None
            return None
        if self.since is None:
            self.since = now
        return self._said(now)

    def _said(self, now: float) -> str | None:
        if self.since is None or now - self.since < self.stall_s:
            return None
        quiet = now - self.since
        if self.unanswered:
            return (
                f"the server at {self.url} stopped answering /metrics for {quiet:.0f} s while the "
                "load ran; the load client was stopped"
            )
        tokens = self.last[0] if self.last else 0.0
        return (
            f"the server at {self.url} is stuck: requests were out and no token moved for "
            f"{quiet:.0f} s (generation_tokens stood at {tokens:.0f}); the load client was stopped"
        )
