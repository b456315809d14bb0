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
from .scrape import Reading, is_url
from .window import NotOneWindow, Window, between

# A window's two ends: the first reading (None: since the server started) and the last.
Pair = tuple[Reading | None, Reading]


def one_source(url: str | None, metrics: tuple[Path, ...], log: Path | None) -> None:
    """The server is read one way: a URL, saved scrapes, or a log."""
    if sum(x is not None and x != () for x in (url, metrics or None, log)) != 1:
        raise BadSetting("give exactly one of URL, --metrics FILE [FILE] or --log FILE")


def check(
    url: str | None = None,
    metrics: tuple[Path, ...] = (),
    log: Path | None = None,
    window_s: float = 5.0,
    baseline: tuple[str, ...] = (),
) -> None:
    """The options alone: a usage error here is one before anything is read."""
    one_source(url, metrics, log)
    if not math.isfinite(window_s) or not 0 <= window_s <= 86400:
        raise BadSetting(f"--window {window_s} is not a number of seconds from 0 to 86400")
    if len(baseline) > 2 or (baseline and any(is_url(b) for b in baseline) and len(baseline) > 1):
        raise BadSetting("--baseline takes one URL, or one or two saved scrapes")
    if baseline and log is not None:
        raise BadSetting(
            "--log has no step times, so no baseline can be compared with it; give the server's "
            "URL or saved scrapes of its /metrics"
        )
    if baseline and is_url(baseline[0]) != (url is not None):
        raise BadSetting(
            "give the baseline the same way as the server: both URLs (read at the same moments), "
            "or both saved scrapes taken at the same times (--baseline FILE --baseline FILE)"
        )
    if baseline and not is_url(baseline[0]) and len(baseline) != len(metrics):
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
    base_url = baseline[0] if baseline and is_url(baseline[0]) else None
    # saved scrapes first: a bad file is refused before any server is read
    spec_files = _saved(metrics) if url is None and log is None else None
    base_files = _saved(tuple(Path(b) for b in baseline)) if baseline and not base_url else None
    live = iter(_read_together([u for u in (url, base_url) if u is not None], window_s, sleep))
    if log is not None:
        spec = read_log(log)
    else:
        spec = _speculative(next(live) if url is not None else spec_files)
    _refuse_no_drafts(spec)
    if not baseline:
        return spec, None
    return spec, _baseline(next(live) if base_url is not None else base_files, spec)


def _saved(files: tuple[Path, ...]) -> Pair:
    """One side's window from saved scrapes: one (since the start) or two (between them)."""
    if not 1 <= len(files) <= 2:
        raise BadSetting("give one saved scrape (since start) or two (the window between them)")
    readings = [scrape.read_file(f) for f in files]
    if len(readings) == 2 and readings[1].at < readings[0].at:
        raise BadSetting(
            f"payoff read {files[0]} then {files[1]}, but {files[1]} was saved first: give "
            "the earlier scrape first (the window is between the files' modification times)"
        )
    return (readings[0] if len(readings) == 2 else None), readings[-1]


def _read_together(urls: list[str], window_s: float, sleep: Callable[[float], None]) -> list[Pair]:
    """Each live server's window, in the order given: all are read at the same moments."""
    if not urls:
        return []
    first = [scrape.fetch(u) for u in urls] if window_s > 0 else None
    if first is not None:
        sleep(window_s)
    last = [scrape.fetch(u) for u in urls]
    return [(None if first is None else first[i], last[i]) for i in range(len(urls))]


def _speculative(pair: Pair | None) -> Window:
    assert pair is not None
    if not pair[1].spec:
        raise NoSpeculation(
            f"{pair[1].source} has no vllm:spec_decode_* counters: the server runs "
            "without --speculative-config, or with --disable-log-stats"
        )
    return between(*pair)


def _refuse_no_drafts(spec: Window) -> None:
    if spec.drafts > 0:
        return
    where = (
        f"in the {spec.seconds:.1f} s window" if spec.seconds and not spec.since_start else "yet"
    )
    raise NoDrafts(
        f"{spec.source} made no drafts {where}: send requests while payoff reads it, "
        + (
            "or widen --window (0 reads everything since the server started)"
            if is_url(spec.source)
            else "or save scrapes with traffic between them (one alone: since the start)"
        )
    )


def _baseline(pair: Pair | None, spec: Window) -> Window:
    """The baseline's window, refused when it cannot be set beside the server's."""
    assert pair is not None
    base = between(*pair)
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
    return base
