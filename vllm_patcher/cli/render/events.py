"""The words for the progress events of long runs (``vllm_patcher/events.py``): a sweep's, a
load's, a rehearsal's and a wheel fetch's lines, one template per event class, filled from its
typed fields (mypy checks each one read)."""

from __future__ import annotations

from ...events import (
    BaselineAgain,
    ConcurrencyDone,
    Extracted,
    FailedAgain,
    Fetched,
    FetchEvent,
    Fetching,
    KRun,
    LoadEvent,
    LookingUp,
    NoBaseline,
    NoRanges,
    PhaseReached,
    RehearsalReady,
    RehearsalStarted,
    RehearseEvent,
    Running,
    RunStarting,
    ServerFailed,
    ServerNext,
    ServerReady,
    ServerStarted,
    ServerStopped,
    SweepEvent,
    SweepOpening,
    WarmingUp,
)


def _left(seconds: float | None) -> str:
    return f", about {seconds:.0f} s to go" if seconds is not None else ""


def sweep_lines(e: SweepEvent) -> list[str]:
    """A sweep's progress lines (each after ``payoff sweep: ``)."""
    match e:
        case SweepOpening():
            from .payoff import sweep_opening

            return sweep_opening(e)
        case ServerNext():
            return [
                f"k = {e.k}: {e.what} server {e.index} of {e.total} "
                f"({e.elapsed:.0f} s so far{_left(e.left)})"
            ]
        case ServerStarted():
            return [f"k = {e.k}: server started (process group {e.pid}), waiting until it is ready"]
        case ServerReady():
            return [f"k = {e.k}: ready in {e.seconds:.0f} s (pid {e.pid}); warming up"]
        case Running():
            return [f"k = {e.k}: {e.url} (running); warming up"]
        case KRun():
            return [f"k = {e.k}: concurrency {e.c}, run {e.run} of {e.repeat}"]
        case ServerStopped():
            return [f"k = {e.k}: server stopped, its process group and descendants gone"]
        case ServerFailed():
            return [f"k = {e.k}: {e.reason}" + (f"; its log: {e.log}" if e.log else "")]
        case FailedAgain():
            return [f"k = {e.k} again: {e.reason}"]
        case NoBaseline():
            return ["the baseline (k = 0) was not measured: no other k can be judged; stopping"]
        case BaselineAgain():
            return [
                f"k = 0 again: {e.what} server {e.total} of {e.total} ({e.elapsed:.0f} s so "
                "far): the baseline a second time, to see whether the host's speed held"
            ]


def bench_line(e: LoadEvent) -> str | None:
    """A load's progress line (after ``payoff bench: ``); None for a run starting."""
    match e:
        case WarmingUp():
            return f"warming {e.url} up ({e.prompts} prompts, not measured)"
        case ConcurrencyDone():
            return f"concurrency {e.c} measured ({e.repeat} run(s))"
        case RunStarting():
            return None


def rehearse_line(e: RehearseEvent) -> str:
    """A rehearsal's progress line (after ``rehearse: ``)."""
    match e:
        case RehearsalStarted():
            return f"server started (process group {e.pid}), waiting until it is ready"
        case PhaseReached():
            return f"{e.label} after {e.elapsed:.0f} s" + (
                f" ({e.tokens} tokens)" if e.tokens else ""
            )
        case RehearsalReady():
            return f"ready after {e.seconds:.0f} s; asking {e.completions} completions"


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    if n >= 1000:
        return f"{n / 1000:.0f} kB"
    return f"{n} B"


def fetch_line(e: FetchEvent) -> str:
    """A wheel fetch's progress line (after ``pin: ``)."""
    match e:
        case LookingUp():
            return f"looking up vllm=={e.version} on {e.host}"
        case Fetching():
            return (
                f"fetching {e.files} files of vllm-{e.version} ({_size(e.bytes)}) from {e.host} "
                "by range requests"
            )
        case NoRanges():
            size = f" ({_size(e.bytes)})" if e.bytes else ""
            return f"{e.host} does not answer range requests; downloading the whole wheel{size} instead"
        case Fetched():
            return (
                f"fetched {e.files} files of vllm-{e.version}: {_size(e.bytes)} in "
                f"{e.requests} requests, {e.seconds:.1f} s ({e.method})"
            )
        case Extracted():
            return (
                f"extracted {e.files} files of vllm-{e.version} from {e.wheel}, "
                "each checked against its RECORD"
            )
