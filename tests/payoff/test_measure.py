"""vllm_patcher/payoff/measure.py: where the readings come from, and the options that say so.
Options that cannot give a verdict's inputs (no source or two, a negative window, a baseline read
another way than the server, or from a log, unequal numbers of scrapes) are usage errors (exit 2)
before anything is read, and saved scrapes of the server or of the baseline given later first are
refused by their modification times, never read as a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..conftest import assert_refused, run_cli
from .scrapes import _scrape_text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((), "needs a server URL"),
        (("http://127.0.0.1:1", "--metrics", "x"), "exactly one of"),
        (("--metrics", "a", "--metrics", "b", "--metrics", "c"), "one saved scrape"),
        (("http://127.0.0.1:1", "--window", "-1"), "--window"),
        (("http://127.0.0.1:1", "--plot", "out.jpg"), ".png"),
        (
            (
                "bench",
                "http://127.0.0.1:1",
                "--baseline-url",
                "http://127.0.0.1:2",
                "--concurrency",
                "x",
            ),
            "--concurrency",
        ),
        (("--log", "x.log", "--baseline", "http://127.0.0.1:2"), "no baseline can be compared"),
        (("--metrics", "a", "--baseline", "http://127.0.0.1:2"), "the same way as the server"),
        (("http://127.0.0.1:1", "--baseline", "b.txt"), "the same way as the server"),
        (("--metrics", "a", "--metrics", "b", "--baseline", "c"), "give the same number"),
        (("--metrics", "a", "--metrics", "b", "--window", "30"), "--window and --watch"),
        (("--metrics", "a", "--watch"), "--window and --watch"),
        (("--log", "x.log", "--window", "5"), "--window and --watch"),
    ],
)
def test_bad_payoff_options_are_usage_errors(args: tuple[str, ...], fragment: str) -> None:
    assert_refused(run_cli("payoff", *args), 2, fragment)


def test_baseline_scrapes_in_the_wrong_order_are_refused_not_read_as_a_restart(
    tmp_path: Path,
) -> None:
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    s1.write_text(_scrape_text(drafts="100"))
    s2.write_text(
        _scrape_text(drafts="200", accepted="120", draft_tokens="600").replace("1000", "2000")
    )
    b1, b2 = tmp_path / "b1.txt", tmp_path / "b2.txt"
    b1.write_text('vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 1.0\n')
    b2.write_text('vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 3.0\n')
    for i, f in enumerate((s1, b1, s2, b2)):  # s1 and b1 saved first, then s2 and b2
        os.utime(f, (1000.0 + 5 * (i // 2), 1000.0 + 5 * (i // 2)))
    swapped = run_cli(
        "payoff", "--metrics", str(s1), str(s2), "--baseline", str(b2), "--baseline", str(b1)
    )
    assert_refused(swapped, 2, f"but {b1} was saved first")
    # saved at the same moment (no order to tell from the files): the counters still tell
    for f in (b1, b2):
        os.utime(f, (1000.0, 1000.0))
    same_time = run_cli(
        "payoff", "--metrics", str(s1), str(s2), "--baseline", str(b2), "--baseline", str(b1)
    )
    assert_refused(same_time, 2, "same modification time")


def test_two_scrapes_of_the_server_given_later_first_are_refused(tmp_path: Path) -> None:
    """Without a baseline too: the later file first would read as a restart and report on the
    earlier scrape alone (27 drafts instead of 860 in the tryout)."""
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    s1.write_text(_scrape_text(drafts="100"))
    s2.write_text(
        _scrape_text(drafts="200", accepted="120", draft_tokens="600").replace("1000", "2000")
    )
    os.utime(s1, (1000.0, 1000.0))
    os.utime(s2, (1005.0, 1005.0))
    forward = run_cli("--json", "payoff", "--metrics", str(s1), str(s2))
    report = json.loads(forward.stdout)
    # read in order: the window between the two scrapes (200 - 100 drafts), not the earlier alone
    assert (forward.returncode, report["drafts"], report["window_s"]) == (0, 100, 5.0), report
    assert_refused(run_cli("payoff", "--metrics", str(s2), str(s1)), 2, "give the earlier")
