"""vllm_patcher/cli/payoff/report.py: ``payoff URL``, the report, on the real command line. Saved
scrapes are read in the order they stand on the command line (``payoff A --metrics B`` is A then
B), a file given as the URL is told to use --metrics, a plot that cannot be written is refused
before anything is measured and one that fails while drawing leaves one JSON answer, and --watch
stops cleanly when nobody reads its output (stdout closed, or piped into head)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, assert_refused, run_cli
from ..payoff.scrapes import (
    _pair,
    _payoff_json,
    _scrape_text,
    decode,
    growing,
    http_server,
    metrics,
    save,
)


def test_a_file_after_a_misplaced_metrics_option_is_read_in_the_order_given(
    tmp_path: Path,
) -> None:
    early, late = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), decode(1000, 0.02, (5, 2), 1000))
    data = _payoff_json(early, "--metrics", late)
    # the window between the two scrapes (1000 - 0 drafts, 10 s apart), not the later one alone
    assert (data["_exit"], data["drafts"], data["window_s"]) == (0, 1000, 10.0), data
    assert_refused(run_cli("payoff", late, "--metrics", early), 2, "give the earlier")


def test_a_file_given_as_the_url_is_told_to_use_metrics(tmp_path: Path) -> None:
    path = save(tmp_path / "file.txt", metrics(drafts=10, per_pos=(5,)), 1000)
    assert_refused(run_cli("payoff", str(path)), 2, "--metrics")


def test_a_plot_that_cannot_be_written_is_refused_before_anything_is_measured(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a.txt"
    a.write_text(_scrape_text())
    proc = run_cli(
        "--json", "payoff", "--metrics", str(a), "--plot", str(tmp_path / "no" / "x.png")
    )
    assert proc.returncode == 2 and proc.stdout.count('"schema"') == 1, proc.stdout


# a plot that fails after the report
def test_a_plot_that_fails_while_drawing_prints_one_envelope(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    files = _pair(tmp_path, "s", metrics(per_pos=(0, 0)), decode(1000, 0.02, (500, 200), 1000))
    plot = tmp_path / "x.png"
    plot.symlink_to(tmp_path / "missing" / "x.png")
    proc = run_cli("--json", "payoff", "--metrics", *files, "--plot", str(plot))
    assert proc.stdout.count('"schema"') == 1 and proc.returncode == 6, proc.stdout
    assert "Traceback" not in proc.stderr


# --watch with stdout closed, and piped into head
@pytest.mark.parametrize("shell", ["{cmd} >&-", "{cmd} | head -2"])
def test_watch_stops_cleanly_when_nobody_reads_its_output(shell: str) -> None:
    with http_server(growing) as url:
        cmd = f"{sys.executable} -m vllm_patcher payoff {url} --watch --window 0.2"
        proc = subprocess.run(
            ["bash", "-c", "set -o pipefail; " + shell.format(cmd=cmd)],
            capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        )  # fmt: skip
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr
