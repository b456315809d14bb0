"""The words for what a long run reached (``progress.Reached``): a sweep's, a rehearsal's, a
load run's and a wheel fetch's progress lines, one template each, filled from the facts the
library passed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ...progress import Reached

Facts = dict[str, Any]


def _left(seconds: float | None) -> str:
    return f", about {seconds:.0f} s to go" if seconds is not None else ""


def _failed(facts: Facts) -> str:
    log = facts.get("log")
    return f"k = {facts['k']}: {facts['reason']}" + (f"; its log: {log}" if log else "")


SWEEP: Mapping[str, Callable[[Facts], str]] = MappingProxyType(
    {
        "server": lambda f: (
            f"k = {f['k']}: {f['what']} server {f['index']} of {f['total']} "
            f"({f['elapsed']:.0f} s so far{_left(f['left'])})"
        ),
        "started": lambda f: (
            f"k = {f['k']}: server started (process group {f['pid']}), waiting until it is ready"
        ),
        "ready": lambda f: (
            f"k = {f['k']}: ready in {f['seconds']:.0f} s (pid {f['pid']}); warming up"
        ),
        "running": lambda f: f"k = {f['k']}: {f['url']} (running); warming up",
        "run": lambda f: f"k = {f['k']}: concurrency {f['c']}, run {f['run']} of {f['repeat']}",
        "stopped": lambda f: (
            f"k = {f['k']}: server stopped, its process group and descendants gone"
        ),
        "failed": _failed,
        "failed again": lambda f: f"k = {f['k']} again: {f['reason']}",
        "no baseline": lambda f: (
            "the baseline (k = 0) was not measured: no other k can be judged; stopping"
        ),
        "baseline again": lambda f: (
            f"k = 0 again: {f['what']} server {f['total']} of {f['total']} ({f['elapsed']:.0f} s so "
            "far): the baseline a second time, to see whether the host's speed held"
        ),
    }
)

REHEARSE: Mapping[str, Callable[[Facts], str]] = MappingProxyType(
    {
        "started": lambda f: (
            f"server started (process group {f['pid']}), waiting until it is ready"
        ),
        "phase": lambda f: (
            f"{f['label']} after {f['elapsed']:.0f} s"
            + (f" ({f['tokens']} tokens)" if f.get("tokens") else "")
        ),
        "ready": lambda f: (
            f"ready after {f['seconds']:.0f} s; asking {f['completions']} completions"
        ),
    }
)


BENCH: Mapping[str, Callable[[Facts], str]] = MappingProxyType(
    {
        "warming": lambda f: f"warming {f['url']} up ({f['prompts']} prompts, not measured)",
        "measured": lambda f: f"concurrency {f['c']} measured ({f['repeat']} run(s))",
    }
)


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    if n >= 1000:
        return f"{n / 1000:.0f} kB"
    return f"{n} B"


FETCH: Mapping[str, Callable[[Facts], str]] = MappingProxyType(
    {
        "looking up": lambda f: f"looking up vllm=={f['version']} on {f['host']}",
        "fetching": lambda f: (
            f"fetching {f['files']} files of vllm-{f['version']} ({_size(f['bytes'])}) from "
            f"{f['host']} by range requests"
        ),
        "no ranges": lambda f: (
            f"{f['host']} does not answer range requests; downloading the whole wheel"
            + (f" ({_size(f['bytes'])})" if f["bytes"] else "")
            + " instead"
        ),
        "fetched": lambda f: (
            f"fetched {f['files']} files of vllm-{f['version']}: {_size(f['bytes'])} in "
            f"{f['requests']} requests, {f['seconds']:.1f} s ({f['method']})"
        ),
        "extracted": lambda f: (
            f"extracted {f['files']} files of vllm-{f['version']} from {f['wheel']}, "
            "each checked against its RECORD"
        ),
    }
)


def sweep_line(note: Reached) -> str:
    """A sweep's progress line (after ``payoff sweep: ``)."""
    return SWEEP[note.what](note.facts)


def rehearse_line(note: Reached) -> str:
    """A rehearsal's progress line (after ``rehearse: ``)."""
    return REHEARSE[note.what](note.facts)


def bench_line(note: Reached) -> str:
    """A load run's progress line (after ``payoff bench: ``)."""
    return BENCH[note.what](note.facts)


def fetch_line(note: Reached) -> str:
    """A wheel fetch's progress line (after ``pin: ``)."""
    return FETCH[note.what](note.facts)
