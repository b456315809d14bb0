"""A finding (one check's verdict, with the fix it suggests) and its level."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARNING, PROBLEM = "ok", "warning", "problem"


@dataclass(frozen=True)
class Finding:
    check: str
    level: str  # ok | warning | problem
    message: str
    fix: str | None = None
