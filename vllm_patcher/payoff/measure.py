"""Where the readings come from: a live server (scraped twice, ``window_s`` apart), saved scrapes,
or log lines; the same for the baseline. Refuses what cannot give a verdict's inputs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import BadSetting, NoDrafts, NoSpeculation
from . import scrape
from .logline import read_log
from .scrape import Reading
from .window import NotOneWindow, Window, between


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def _pair(
    url: str | None, files: tuple[Path, ...], live: list[tuple[str, list[Reading]]]
) -> tuple[Reading | None, Reading] | None:
    """The readings of one side from files now; a URL is read later, with the other URLs."""
    if url is not None:
        live.append((url, []))
        return None
    if not 1 <= len(files) <= 2:
        raise BadSetting("give one saved scrape (since start) or two (the window between them)")
    readings = [scrape.read_file(f) for f in files]
    if len(readings) == 2 and readings[1].at < readings[0].at:
        raise BadSetting(
            f"payoff read {files[0]} then {files[1]}, but {files[1]} was saved first: give "
            "the earlier scrape first (the window is between the files' modification times)"
        )
    return (readings[0] if len(readings) == 2 else None), readings[-1]


def check(
    url: str | None = None,
    metrics: tuple[Path, ...] = (),
    log: Path | None = None,
    window_s: float = 5.0,
    baseline: tuple[str, ...] = (),
) -> None:
    """The options alone: a usage error here is one before anything is read."""
    if sum(x is not None and x != () for x in (url, metrics or None, log)) != 1:
        raise BadSetting("give exactly one of URL, --metrics FILE [FILE] or --log FILE")
    if not math.isfinite(window_s) or not 0 <= window_s <= 86400:
        raise BadSetting(f"--window {window_s} is not a number of seconds from 0 to 86400")
    if len(baseline) > 2 or (baseline and any(_is_url(b) for b in baseline) and len(baseline) > 1):
        raise BadSetting("--baseline takes one URL, or one or two saved scrapes")
    if baseline and log is not None:
        raise BadSetting(
            "--log has no step times, so no baseline can be compared with it; give the server's "
            "URL or saved scrapes of its /metrics"
        )
    if baseline and _is_url(baseline[0]) != (url is not None):
        raise BadSetting(
            "give the baseline the same way as the server: both URLs (read at the same moments), "
            "or both saved scrapes taken at the same times (--baseline FILE --baseline FILE)"
        )
    if baseline and not _is_url(baseline[0]) and len(baseline) != len(metrics):
        raise BadSetting(
            f"{len(metrics)} saved scrape(s) of the server but {len(baseline)} of the baseline: "
            "give the same number, taken at the same times (repeat --baseline for each: "
            "--baseline FILE --baseline FILE)"
        )


def measure(
    url: str | None = None,
    metrics: tuple[Path, ...] = (),
    log: Path | None = None,
    window_s: float = 5.0,
    baseline: tuple[str, ...] = (),
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Window, Window | None]:
    """The speculative server's window and the baseline's (None without one)."""
    check(url, metrics, log, window_s, baseline)
    live: list[tuple[str, list[Reading]]] = []
    spec_files = None if log is not None else _pair(url, metrics, live)
    base_url = baseline[0] if baseline and _is_url(baseline[0]) else None
    base_files = _pair(base_url, tuple(Path(b) for b in baseline), live) if baseline else None
    if live:  # every live server is read at the same moments
        if window_s > 0:
            for u, got in live:
                got.append(scrape.fetch(u))
            sleep(window_s)
        for u, got in live:
            got.append(scrape.fetch(u))
    readings = {u: got for u, got in live}
    if log is not None:
        spec = read_log(log)
    else:
        if url is not None:
            got = readings[url]
            spec_pair: tuple[Reading | None, Reading] = (got[0] if len(got) == 2 else None, got[-1])
        else:
            assert spec_files is not None
            spec_pair = spec_files
        if not spec_pair[1].spec:
            raise NoSpeculation(
                f"{spec_pair[1].source} has no vllm:spec_decode_* counters: the server runs "
                "without --speculative-config, or with --disable-log-stats"
            )
        spec = between(*spec_pair)
    if spec.drafts <= 0:
        where = (
            f"in the {spec.seconds:.1f} s window"
            if spec.seconds and not spec.since_start
            else "yet"
        )
        from_url = spec.source.startswith(("http://", "https://"))
        raise NoDrafts(
            f"{spec.source} made no drafts {where}: send requests while payoff reads it, "
            + (
                "or widen --window (0 reads everything since the server started)"
                if from_url
                else "or save scrapes with traffic between them (one alone: since the start)"
            )
        )
    base = None
    if baseline:
        if base_url is not None:
            got = readings[base_url]
            base_pair: tuple[Reading | None, Reading] = (got[0] if len(got) == 2 else None, got[-1])
        else:
            assert base_files is not None
            base_pair = base_files
        base = between(*base_pair)
        if base.reset or spec.reset:
            which = "the baseline's" if base.reset else "the server's"
            raise NotOneWindow(
                f"{which} counters went down between its readings (given in the wrong order, or "
                "it restarted): the two windows cannot be compared; read both again"
            )
        if base.spec and base.drafts > 0:
            raise BadSetting(
                f"the baseline {base.source} runs speculative decoding too; give the same model "
                "served without --speculative-config"
            )
        if base.steps <= 0 or base.emitted <= 0:
            raise NoDrafts(
                f"the baseline {base.source} made no decode steps in the window: put the same "
                "load on it while payoff reads both"
            )
    return spec, base
