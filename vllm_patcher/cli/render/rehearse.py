"""What rehearse shows, as text and as JSON, from one result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import outcomes
from ..base import Shown

if TYPE_CHECKING:  # the rehearsal's machinery is imported when it runs
    from ...doctor.faults import KnownFailure
    from ...rehearse.run import Plan, Rehearsal


def rehearsal(result: Rehearsal) -> Shown:
    from ...rehearse import run as rehearsal_mod
    from . import rehearsal as report

    code = outcomes.of_rehearsal(result)
    return Shown(code, rehearsal_mod.to_dict(result), report.lines(result))


def opening(plan: Plan, known: Sequence[KnownFailure] = ()) -> list[str]:
    """The lines on stderr as the rehearsal starts: what runs, what of the user's was replaced,
    and the known failures it is about to walk into (with the flags that avoid each)."""
    drafter = "; the drafter with its own weights" if plan.real_drafter else ""
    return [
        f"vllm serve {plan.args.model} with --load-format dummy: random weights, no checkpoint "
        f"read{drafter}",
        *(f"ignored: {note}" for note in plan.ignored),
        *(
            f"known failure ({f.key}) of {f.patch}'s path: {f.what}; {f.measured}. "
            f"Avoid it with {f.workaround}"
            for f in known
        ),
    ]
