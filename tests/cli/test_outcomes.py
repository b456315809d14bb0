"""The one table from a finished command's outcome to its exit code (cli/outcomes.py), read
against the exit-code table of docs/commands.md: each outcome's row there names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_patcher.cli import outcomes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def _rows() -> dict[int, str]:
    section = DOCS.read_text().split("## Exit codes", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip().isdigit():
            rows[int(cells[1])] = cells[2]
    return rows


# what the docs' row of each outcome's code says of it
SAID = {
    ("verdict", "pays"): "done",
    ("verdict", "unknown"): "done",
    ("verdict", "break-even"): "`break-even`",
    ("verdict", "loses"): "`loses`",
    ("rehearsal", "ready"): "done",
    ("rehearsal", "no-speculation"): "done",
    ("rehearsal", "no-drafts"): "counted no drafts",
    ("rehearsal", "usage"): "vLLM's own argument parser refused",
    ("rehearsal", "failed"): "exited, or failed a completion",
    ("rehearsal", "not-ready"): "did not become ready",
    ("status --check", "ready"): "done",
    ("status --check", "not-ready"): "`status --check` found a patch not ready",
    ("verify", "passed"): "done",
    ("verify", "failed"): "`verify` found a failing check",
    ("doctor", "ok"): "done",
    ("doctor", "problem"): "`doctor` found a problem",
    ("serve-args", "problem"): "`serve-args` refused because doctor found one",
    ("cluster", "ready"): "done",
    ("cluster", "not-ready"): "`cluster` found a node not ready",
    ("cluster", "lost"): "a node died or did not answer",
    ("port", "written"): "done",
    ("port", "conflicts"): "`port` or `import` left conflicts",
    ("import", "written"): "done",
    ("import", "conflicts"): "`port` or `import` left conflicts",
}


def test_every_outcome_s_code_is_the_docs_row_that_names_it() -> None:
    rows = _rows()
    table = {
        **{("verdict", k): v for k, v in outcomes.VERDICTS.items()},
        **{("rehearsal", k): v for k, v in outcomes.REHEARSALS.items()},
        **outcomes.FOUND,
    }
    assert set(table) == set(SAID)
    for outcome, code in table.items():
        assert SAID[outcome] in rows[code], (outcome, code, rows[code][:200])


@pytest.mark.parametrize(
    ("pays_at", "rows", "code"),
    [
        ([4], ["loses", "pays"], 0),  # pays somewhere
        ([], ["unknown", "unknown"], 0),  # nothing measured: said in the report
        ([], ["unknown", "break-even"], 1),
        ([], ["loses"], 1),
    ],
)
def test_a_bench_fails_only_when_no_row_pays_and_one_was_measured_not_to(
    pays_at: list[int], rows: list[str], code: int
) -> None:
    assert outcomes.bench(pays_at, rows) == code


def test_a_sweep_with_a_server_that_did_not_start_exits_21_whatever_its_verdict() -> None:
    assert [outcomes.sweep(v, False) for v in ("pays", "unknown", "loses")] == [0, 0, 1]
    assert outcomes.sweep("pays", True) == 21
    assert outcomes.rehearsal("failed", usage=True) == 2
    assert outcomes.rehearsal("no-drafts", usage=True) == 23


def test_a_lost_node_wins_over_a_node_not_ready_and_status_fails_only_under_check() -> None:
    assert [outcomes.cluster(True, False), outcomes.cluster(False, False)] == [0, 1]
    assert outcomes.cluster(False, True) == outcomes.cluster(True, True) == 12
    assert [outcomes.status(False, False), outcomes.status(True, True)] == [0, 0]
    assert outcomes.status(False, True) == 1
