"""The repeats of one load, read together: their /metrics windows merged into one (``merged``),
the requests vLLM's benchmark client counted as failed (``failures``, ``failed_note``), and how
far apart one server's runs are (``noise``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..payoff.judge import spread
from ..payoff.window import Window


def merged(windows: list[Window]) -> Window:
    """The repeats' windows of one concurrency as one: their counts added."""
    first = windows[0]
    if len(windows) == 1:
        return first
    k = max(w.k for w in windows)

    def total(name: str) -> float:
        return float(sum(getattr(w, name) for w in windows))

    return dataclasses.replace(
        first,
        seconds=sum(w.seconds or 0.0 for w in windows) or None,
        k=k,
        per_pos=tuple(sum(w.per_pos[i] if i < w.k else 0.0 for w in windows) for i in range(k)),
        drafts=total("drafts"),
        draft_tokens=total("draft_tokens"),
        accepted=total("accepted"),
        generation_tokens=total("generation_tokens"),
        first_tokens=total("first_tokens"),
        step_seconds=total("step_seconds"),
        steps=total("steps"),
    )


def failures(results: list[dict[str, Any]], prompts: int = 0) -> tuple[int, int]:
    """(requests that failed, requests sent) over vllm bench serve's results: the client's
    ``failed``, or the prompts it sent (``num_prompts``, else ``prompts``) less those it
    ``completed``."""
    failed = sent = 0
    for result in results:
        asked, done, bad = (result.get(n) for n in ("num_prompts", "completed", "failed"))
        n = asked if isinstance(asked, int) else prompts
        missing = n - done if isinstance(done, int) and n else 0
        failed += max(bad if isinstance(bad, int) else 0, missing)
        sent += n
    return failed, sent


def failed_note(results: list[dict[str, Any]]) -> str:
    """ ", but N of M requests failed (...)" when the client counted failures: the reason there
    were no drafts is then the requests (a prompt longer than --max-model-len answers 400), not
    the server; else ""."""
    failed, sent = failures(results)
    if not failed:
        return ""
    return (
        f", but {failed} of {sent or '?'} requests failed: the server refused them (its log "
        "says why; a prompt longer than --max-model-len is answered 400: set the client's "
        "--random-input-len and --random-output-len to fit)"
    )


def noise(results: list[dict[str, Any]]) -> float:
    """How far apart one server's runs are (vllm bench serve's results): per-token time or
    throughput, the wider spread."""
    widest = 0.0
    for key in ("mean_tpot_ms", "output_throughput"):
        values = [float(v) for r in results if isinstance(v := r.get(key), int | float) and v > 0]
        widest = max(widest, spread(values))
    return widest
