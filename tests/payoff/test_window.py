"""vllm_patcher/payoff/window.py: two readings make one server's window, or are refused. Scrapes
of two engines (two servers behind a load balancer) or of two models, a window no one server's
counters can hold (more tokens accepted than drafted) and counters that went down between two
scrapes saved at the same moment are refused with exit 2 and one line: never read as a restart,
never printed as a rate above 100%."""

from __future__ import annotations

import re
from pathlib import Path

from ..conftest import assert_refused, run_cli
from .scrapes import _pair, _scrape_text, decode, metrics, save


# two engines behind a load balancer
def test_scrapes_of_two_engines_are_not_one_window_and_no_rate_above_100_is_printed(
    tmp_path: Path,
) -> None:
    first = metrics(drafts=100, per_pos=(50, 20), engine="0")
    second = metrics(drafts=150, per_pos=(140, 120), engine="1")
    files = _pair(tmp_path, "s", first, second)
    assert_refused(run_cli("payoff", "--metrics", *files), 2, "engine")
    # same labels, but a window with more accepted than drafted tokens
    third = metrics(drafts=110, draft_tokens=220, accepted=200, per_pos=(60, 25))
    files = _pair(tmp_path, "t", metrics(drafts=100, per_pos=(50, 20)), third)
    proc = run_cli("payoff", "--metrics", *files)
    assert proc.returncode in (2, 18) and not re.search(r"\b[1-9]\d{2,}\.\d%", proc.stdout)


def test_equal_modification_times_are_not_called_a_restart(tmp_path: Path) -> None:
    later = save(tmp_path / "a.txt", decode(1000, 0.02, (500, 200), 1000), 1000)
    earlier = save(tmp_path / "b.txt", decode(500, 0.02, (250, 100), 500), 1000)
    proc = run_cli("payoff", "--metrics", str(later), str(earlier))
    assert "restart" not in proc.stdout + proc.stderr, proc.stdout
    assert_refused(proc, 2, "same modification time")


def test_two_readings_of_different_servers_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(_scrape_text())
    b.write_text(_scrape_text(drafts="200").replace('model_name="m"', 'model_name="other"'))
    assert_refused(
        run_cli("payoff", "--metrics", str(a), str(b)), 2, "not two readings of one server"
    )
