"""A load on a server that stopped answering: its /metrics and /health still answer, but
``generation_tokens`` does not move. ``Stall`` is asked while the load client runs (see
``runtime.run_script``'s ``watch``) and names the stall once the counter has stood still for
``STALL_S``, so that the client is stopped within minutes rather than at its own hour."""

from __future__ import annotations

import time

from ..errors import PatcherError
from . import scrape

STALL_S = 180.0  # no token generated for this long while requests are out: stuck
WATCH_EVERY_S = 10.0


class Stall:
    def __init__(self, url: str, stall_s: float | None = None) -> None:
        self.url = url
        self.stall_s = STALL_S if stall_s is None else stall_s
        self.last: float | None = None
        self.since = time.monotonic()

    def __call__(self) -> str | None:
        try:
            tokens: float | None = scrape.fetch(self.url).generation_tokens
        except PatcherError:  # no answer counts as no movement
            tokens = None
        now = time.monotonic()
        if tokens is not None and tokens != self.last:
            self.last, self.since = tokens, now
            return None
        if now - self.since < self.stall_s:
            return None
        return (
            f"the server at {self.url} is stuck: no token generated for {now - self.since:.0f} s "
            f"while the load ran (its generation_tokens stood at {self.last or 0:.0f}); the load "
            "client was stopped"
        )
