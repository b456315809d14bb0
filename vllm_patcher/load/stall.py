"""A load on a server that stopped answering: its /metrics and /health still answer, but no
token moves. ``Stall`` is asked while the load client runs (see ``serving.client.run``'s
``watch``) and names the stall once requests were out and neither ``generation_tokens`` nor
``prompt_tokens`` moved for ``STALL_S``, so that the client is stopped within minutes rather than
at its own hour. Requests are out when the server's gauges say so (running or waiting) or the
load client has its own out (``client_out``: its connections to the server,
``serving.client.requests_out``), so that an API front end that took the requests and handed none
to its engine is seen too. Time with no request out (the client still starting) does not count; a
/metrics that stops answering is said as such."""

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
        self.engine_out = 0.0  # at the last look: running or waiting, by the server's gauges
        self.client_out = 0  # at the last look: the load client's own requests out

    def __call__(self, client_out: int = 0) -> str | None:
        """One look; ``client_out``: the requests the load client has out to the server now."""
        now = time.monotonic()
        self.client_out = client_out
        try:
            r = scrape.fetch(self.url)
        except PatcherError:  # no answer: no movement either
            self.unanswered = True
            if self.since is None:
                self.since = now
            return self._said(now)
        self.unanswered = False
        moved = (r.generation_tokens, r.prompt_tokens)
        self.engine_out = r.running + r.waiting
        if moved != self.last or max(self.engine_out, client_out) <= 0:
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
        out = "requests were out"
        if self.engine_out <= 0:  # the client's alone: the engine never got them
            out = (
                f"the load client had {self.client_out} requests out, none running or waiting "
                "on its engine (its API server stopped handing them on),"
            )
        return (
            f"the server at {self.url} is stuck: {out} and no token moved for {quiet:.0f} s "
            f"(generation_tokens stood at {tokens:.0f}); the load client was stopped"
        )
