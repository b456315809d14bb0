"""What rehearse shows, as text and as JSON, from one result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import Shown

if TYPE_CHECKING:  # the rehearsal's machinery is imported when it runs
    from ...rehearse.run import Rehearsal


def rehearsal(result: Rehearsal) -> Shown:
    from ...rehearse import report
    from ...rehearse import run as rehearsal_mod

    return Shown(report.exit_code(result), rehearsal_mod.to_dict(result), report.lines(result))
