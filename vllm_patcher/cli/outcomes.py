"""From an outcome to the exit code: the one table (pip's ``status_codes.py`` is the model).

Failures that stop a command are exceptions, each with its code (``errors``); these tables hold
the codes of commands that ran to the end and found something: payoff's verdicts, a bench, a
sweep, a rehearsal, a check (status --check, verify, doctor, serve-args, cluster), a port or an
import. Libraries return their objects; only the command line turns them into exit codes, here. ``tests/cli/test_outcomes.py`` reads the exit-code table of docs/commands.md against
it."""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

from ..errors import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_REHEARSAL_FAILED,
    EXIT_REHEARSAL_NO_DRAFTS,
    EXIT_SERVER_NOT_STARTED,
    EXIT_USAGE,
    ClusterError,
    PortConflict,
    ServeRefused,
)
from ..payoff.judge import BREAK_EVEN, LOSES, PAYS, UNKNOWN

# payoff's verdict: only a measured loss (or a draw) fails; unknown says so in the report
VERDICTS = MappingProxyType(
    {PAYS: EXIT_OK, UNKNOWN: EXIT_OK, BREAK_EVEN: EXIT_CHECK_FAILED, LOSES: EXIT_CHECK_FAILED}
)

# a rehearsal's outcome; "usage": vLLM's own argument parser refused, as `vllm serve` would
REHEARSALS = MappingProxyType(
    {
        "ready": EXIT_OK,
        "no-speculation": EXIT_OK,
        "no-drafts": EXIT_REHEARSAL_NO_DRAFTS,
        "usage": EXIT_USAGE,
        "failed": EXIT_REHEARSAL_FAILED,
        "not-ready": EXIT_REHEARSAL_FAILED,
    }
)

# what a check found (status --check, verify, doctor, serve-args, cluster), and whether port or
# import wrote every release: the command's name, its outcome
FOUND = MappingProxyType(
    {
        ("status --check", "ready"): EXIT_OK,
        ("status --check", "not-ready"): EXIT_CHECK_FAILED,
        ("verify", "passed"): EXIT_OK,
        ("verify", "failed"): EXIT_CHECK_FAILED,
        ("doctor", "ok"): EXIT_OK,
        ("doctor", "problem"): EXIT_CHECK_FAILED,
        ("serve-args", "problem"): ServeRefused.exit_code,  # raised after the problems are shown
        ("cluster", "ready"): EXIT_OK,
        ("cluster", "not-ready"): EXIT_CHECK_FAILED,
        ("cluster", "lost"): ClusterError.exit_code,  # a node died or did not answer
        ("port", "written"): EXIT_OK,
        ("port", "conflicts"): PortConflict.exit_code,
        ("import", "written"): EXIT_OK,
        ("import", "conflicts"): PortConflict.exit_code,
    }
)


def found(command: str, outcome: str) -> int:
    """What ``command`` found (``FOUND``'s second column), as its exit code."""
    return FOUND[(command, outcome)]


def status(ready: bool, check: bool) -> int:
    """status: 0 unless ``--check`` found a patch not ready (or a run in progress)."""
    return found("status --check", "ready" if ready or not check else "not-ready")


def cluster(ready: bool, lost: bool) -> int:
    """cluster: a node lost (it died or did not answer) wins over a node not ready."""
    return found("cluster", "lost" if lost else "ready" if ready else "not-ready")


def verdict(judged: str | None) -> int:
    return VERDICTS.get(judged or UNKNOWN, EXIT_OK)


def bench(pays_at: Iterable[int], row_verdicts: Iterable[str]) -> int:
    """payoff bench: 1 when no row pays and one at least breaks even or loses."""
    rows = list(row_verdicts)
    if list(pays_at) or all(v == UNKNOWN for v in rows):
        return EXIT_OK
    return max(verdict(v) for v in rows)


def sweep(judged: str, servers_failed: bool) -> int:
    """payoff sweep: the verdict's code, or 21 when a server did not start (after the report,
    which names each and its log)."""
    return EXIT_SERVER_NOT_STARTED if servers_failed else verdict(judged)


def rehearsal(outcome: str, usage: bool) -> int:
    """``usage``: the failure's cause is vLLM's own argument parser."""
    key = "usage" if outcome not in ("ready", "no-speculation", "no-drafts") and usage else outcome
    return REHEARSALS.get(key, EXIT_REHEARSAL_FAILED)


def of_rehearsal(r: Any) -> int:
    from ..rehearse.failures import USAGE

    return rehearsal(r.outcome, r.cause is not None and r.cause.key == USAGE)
