"""What rehearse shows, as text and as JSON, from one result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import Shown

if TYPE_CHECKING:  # the rehearsal's machinery is imported when it runs
    from ...rehearse.run import Plan, Rehearsal


def rehearsal(result: Rehearsal) -> Shown:
    from ...rehearse import report
    from ...rehearse import run as rehearsal_mod

    return Shown(report.exit_code(result), rehearsal_mod.to_dict(result), report.lines(result))


def opening(plan: Plan) -> list[str]:
    """The lines on stderr as the rehearsal starts: what runs, and what of the user's was replaced."""
    drafter = "; the drafter with its own weights" if plan.real_drafter else ""
    return [
        f"vllm serve {plan.args.model} with --load-format dummy: random weights, no checkpoint "
        f"read{drafter}",
        *(f"ignored: {note}" for note in plan.ignored),
    ]
