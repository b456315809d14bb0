"""vllm_patcher/payoff/run.py: payoff's one entry point, driven with a scripted measurement.
``--watch`` pauses after each read it cannot judge (no drafts, a server down, two readings that
are not one window), says so and reads again until Ctrl-C, and returns the last analysis it showed;
a bad option is still refused at once."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_patcher.errors import ServerUnreachable


# --watch, a pause between failed reads, and it carries on
def test_watch_pauses_between_failed_reads_and_carries_on_through_every_window_error() -> None:
    from vllm_patcher.errors import BadSetting, NoDrafts
    from vllm_patcher.payoff import run
    from vllm_patcher.payoff.analysis import analyse
    from vllm_patcher.payoff.window import NotOneWindow

    good = analyse(__import__("dataclasses").replace(_spec_window(), source="http://x"))
    script: list[Any] = [
        NoDrafts("empty"),
        ServerUnreachable("down"),
        ServerUnreachable("down"),
        NotOneWindow("went down"),
        good,
        KeyboardInterrupt(),
    ]
    calls: list[str] = []

    def fake_once(*_: Any) -> Any:
        calls.append("read")
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    shown: list[Any] = []
    last = run.report(
        "http://x", (), None, 1.0, (), watch=True,
        show=lambda s, refresh=False: shown.append(s) or True,
        once=fake_once, sleep=lambda s: calls.append(f"sleep {s}"),
    )  # fmt: skip
    # four "reading again" lines and one report, the last analysis returned
    assert last is good and len(shown) == 5, shown
    for i, call in enumerate(calls[:-1]):
        if call == "read" and i < 7:  # every failed read is followed by a pause
            assert calls[i + 1].startswith("sleep"), calls
    with pytest.raises(BadSetting):  # a bad option is still refused at once
        run.report(
            None, (), None, 1.0, ("a", "b", "c"), watch=True,
            show=lambda s, refresh=False: True,
        )  # fmt: skip


def _spec_window() -> Any:
    from vllm_patcher.payoff.window import Window

    return Window("s", 10.0, False, False, 2, 1000, 2000, 900, (600, 300), 3000, 10, 40.0, 2000)
