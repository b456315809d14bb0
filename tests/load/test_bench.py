"""payoff bench's judgement on a fake client and fake servers: the rows in ascending concurrency,
a summary that agrees with them, each row's acceptance from its own window, both measures,
repeats whose spread decides whether there is a verdict (the plain server's own spread over
them), no drafts said as failed requests where they failed; and SIGTERM or SIGHUP stop its client."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vllm_patcher.cli import outcomes
from vllm_patcher.cli.render import payoff as render_payoff
from vllm_patcher.cli.render.payoff import bench_summary
from vllm_patcher.load import bench, engine
from vllm_patcher.load.bench import base_noise
from vllm_patcher.load.repeats import failed_note
from vllm_patcher.load.vllm_bench import WARM_UP_PROMPTS
from vllm_patcher.payoff import scrape

from ..conftest import REPO
from ..payoff.scrapes import metrics
from .points import point

SPEC, BASE = "http://spec", "http://base"


class FakeServers:
    """The client's result and the two servers' counters for one run per call: at concurrency c
    the speculative server's per-token time is the plain one's over ``speedups[c]`` (one value
    per repeat), its throughput ``throughput[c]`` times the plain one's (default: the speedup),
    and it accepts ``acceptance[c]`` of its first draft position."""

    def __init__(
        self,
        speedups: dict[int, list[float]],
        acceptance: dict[int, float] | None = None,
        throughput: dict[int, list[float]] | None = None,
    ) -> None:
        self.speedups = {c: list(v) for c, v in speedups.items()}
        self.throughput = {c: list(v) for c, v in (throughput or {}).items()}
        self.acceptance = acceptance or {}
        self.totals = {SPEC: [0.0] * 8, BASE: [0.0] * 8}
        self.pending: dict[str, list[float]] = {}
        self.order: list[int] = []
        self.calls: list[tuple[str, int, int]] = []  # (url, concurrency, prompts) per run

    def client(self, python: str, argv: list[str], *_: Any, **__: Any) -> dict[str, Any]:
        url = argv[argv.index("--base-url") + 1]
        c = int(argv[argv.index("--max-concurrency") + 1])
        prompts = int(argv[argv.index("--num-prompts") + 1])
        self.calls.append((url, c, prompts))
        if prompts == WARM_UP_PROMPTS:  # counted by the server (1000 drafts, none accepted)
            self.pending[url] = [1000 if url == SPEC else 0, 0, 0, 1000, 1016, 16, 50.0, 1000]
            return {"mean_tpot_ms": 50.0, "output_throughput": 20.0, "completed": prompts}
        if url == BASE:
            self.pending[url] = [0, 0, 0, 1000, 1016, 16, 10.0, 1000]
            return {"mean_tpot_ms": 10.0, "output_throughput": 100.0, "completed": 16}
        self.order.append(c)
        s = self.speedups[c].pop(0)
        thr = self.throughput[c].pop(0) if c in self.throughput else s
        a = self.acceptance.get(c, 0.5)
        accepted = 1000 * a + 1000 * a * a
        emitted = 1000 + accepted
        self.pending[url] = [1000, 1000 * a, 1000 * a * a, 1000, emitted + 16, 16,
                             emitted * 0.010 / s, 1000]  # fmt: skip
        return {"mean_tpot_ms": 10.0 / s, "output_throughput": 100.0 * thr, "completed": 16}

    def fetch(self, url: str, timeout: float = 10.0) -> scrape.Reading:
        t = self.totals[url]
        for i, v in enumerate(self.pending.pop(url, [0.0] * 8)):
            t[i] += v
        text = metrics(
            drafts=t[0], draft_tokens=2 * t[0], per_pos=(t[1], t[2]), generation=t[4],
            first_tokens=t[5], itl_sum=t[6], itl_count=t[7], spec=url == SPEC,
        )  # fmt: skip
        return scrape.parse(text, url, time.time())


def _run(
    monkeypatch: pytest.MonkeyPatch, fake: FakeServers, levels: list[int], **kw: Any
) -> bench.BenchResult:
    monkeypatch.setattr(engine, "client", fake.client)
    monkeypatch.setattr(engine, "check_client_args", lambda python, argv: None)
    monkeypatch.setattr(engine.scrape, "fetch", fake.fetch)
    return bench.run("python", SPEC, BASE, levels, 16, "random", (), **kw)


@pytest.mark.parametrize("levels", [[16, 4, 1], [1, 16, 4]])
def test_concurrencies_given_out_of_order_are_measured_and_summed_up_in_ascending_order(
    monkeypatch: pytest.MonkeyPatch, levels: list[int]
) -> None:
    fake = FakeServers({1: [1.5], 4: [0.8], 16: [0.7]})
    result = _run(monkeypatch, fake, levels)
    data = result.to_dict()
    assert [p["concurrency"] for p in data["points"]] == [1, 4, 16]
    assert data["pays_at"] == [1] and data["stops_paying_above"] == 1
    assert bench_summary(result) == "speculation stops paying above concurrency 1"


VERDICT_SPEEDUPS = {"pays": 1.5, "break-even": 1.0, "loses": 0.7}


@pytest.mark.parametrize(
    "verdicts", list(itertools.product(["pays", "break-even", "loses", "unknown"], repeat=3))
)
def test_the_summary_line_agrees_with_the_rows(
    monkeypatch: pytest.MonkeyPatch, verdicts: tuple[str, ...]
) -> None:
    levels = [1, 4, 16]
    speed = {c: [VERDICT_SPEEDUPS.get(v, 1.5)] for c, v in zip(levels, verdicts, strict=True)}
    thr = {c: [0.7] for c, v in zip(levels, verdicts, strict=True) if v == "unknown"}
    result = _run(monkeypatch, FakeServers(speed, throughput=thr), levels)
    rows = [p["verdict"] for p in result.to_dict()["points"]]
    assert rows == list(verdicts)
    said = bench_summary(result)
    paying = [c for c, v in zip(levels, rows, strict=True) if v == "pays"]
    if "does not pay" in said or "pays nowhere" in said:
        assert not paying, (rows, said)
    if "pays at every concurrency" in said:
        assert rows == ["pays"] * 3
    if m := __import__("re").search(r"stops paying above concurrency (\d+)", said):
        x = int(m[1])
        below = [v for c, v in zip(levels, rows, strict=True) if c <= x]
        above = [v for c, v in zip(levels, rows, strict=True) if c > x]
        assert set(below) == {"pays"} and above and set(above) <= {"loses", "break-even"}
    for c, v in zip(levels, rows, strict=True):
        if v == "unknown":
            assert "unknown" in said and str(c) in said, (rows, said)
    if paying:
        assert any(str(c) in said for c in paying) or "every" in said, (rows, said)
    code = outcomes.bench(result.pays_at, [v for _, v in result.verdicts()])
    assert code == (0 if paying or set(rows) == {"unknown"} else 1), (rows, said)


def test_each_server_is_warmed_up_first_and_the_warm_up_is_in_no_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new server's first requests pay one-off costs: payoff bench once said "pays 18.86x" on
    freshly started servers with --repeat 1, where a second run said unknown. Each server now
    gets WARM_UP_PROMPTS at the highest concurrency first; the fake counts that warm-up on the
    servers (1000 drafts, none accepted, slow steps), so a row that held it would show it."""
    fake = FakeServers({1: [1.5], 4: [1.5]})
    result = _run(monkeypatch, fake, [4, 1])
    assert fake.calls[:2] == [(SPEC, 4, WARM_UP_PROMPTS), (BASE, 4, WARM_UP_PROMPTS)]
    assert [p for _, _, p in fake.calls[2:]] == [16] * 4  # one run a side a concurrency
    assert result.to_dict()["warm_up_drafts"] == 1000  # counted by the server, said apart
    for p in result.to_dict()["points"]:
        assert p["acceptance_rate"] == pytest.approx((0.5 + 0.25) / 2, abs=1e-4), p
        assert p["verdict"] == "pays" and p["speedup"] == pytest.approx(1.5), p


def test_client_arguments_are_parsed_by_the_clients_own_parser_before_any_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tryout: `-- --bogus-flag 1` was refused by the first load, after "warming ... up" had
    been printed; the sweep parses them first, and so does payoff bench now."""
    from vllm_patcher.errors import BadSetting

    fake = FakeServers({1: [1.5]})
    parsed: list[list[str]] = []

    def refuse(python: str, argv: list[str]) -> None:
        parsed.append(argv)
        raise BadSetting("vllm bench serve refused its arguments: unrecognized arguments")

    monkeypatch.setattr(engine, "client", fake.client)
    monkeypatch.setattr(engine, "check_client_args", refuse)
    said: list[object] = []
    with pytest.raises(BadSetting, match="unrecognized"):
        bench.run("python", SPEC, BASE, [1], 16, "random", ("--bogus-flag", "1"), say=said.append)
    assert parsed and parsed[0][-2:] == ["--bogus-flag", "1"]
    assert fake.calls == [] and said == []  # no warm-up, no load


def test_the_options_the_load_refuses_are_the_ones_it_sets() -> None:
    """--endpoint was refused as "set by payoff bench", which sets no endpoint: a chat-endpoint
    benchmark could not be run. LOAD_SETS is what load_argv sets, with --host and --port, which
    its --base-url overrides."""
    from vllm_patcher.load.vllm_bench import LOAD_SETS, load_argv, set_by_the_load

    argv = load_argv("http://h:1", 2, 8, "random", "/d", "f.json", ())
    named = {a for a in argv if a.startswith("--")} - {"--ignore-eos"}
    assert named | {"--host", "--port"} == LOAD_SETS
    assert set_by_the_load(("--endpoint", "/v1/chat/completions")) is None


def test_each_rows_acceptance_is_that_concurrencys_own_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeServers({1: [1.5], 4: [1.2], 16: [0.9]}, acceptance={1: 0.8, 4: 0.5, 16: 0.2})
    points = _run(monkeypatch, fake, [1, 4, 16]).to_dict()["points"]
    for p, a in zip(points, (0.8, 0.5, 0.2), strict=True):
        assert p["acceptance_rate"] == pytest.approx((a + a * a) / 2, abs=1e-4), p


def test_per_token_time_and_throughput_that_disagree_give_unknown_with_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a measured H200 run at concurrency 4: 1.63x per-token time, half the plain throughput
    fake = FakeServers({4: [1.63]}, throughput={4: [0.53]})
    result = _run(monkeypatch, fake, [4])
    point = render_payoff.bench(result).data["points"][0]  # type: ignore[index]
    assert point["verdict"] == "unknown", point
    assert point["unknown"]["kind"] == "figures-disagree", point
    assert point["speedup"] == pytest.approx(1.63) and point["throughput_ratio"] == pytest.approx(
        0.53
    )
    assert "1.63x" in point["unknown_reason"] and "0.53x" in point["unknown_reason"]
    keys = list(point)  # the reason in words right after the verdict, as before notes
    assert keys[keys.index("verdict") + 1] == "unknown_reason", keys


def test_repeats_give_a_verdict_only_when_their_spread_stays_in_one_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeServers({1: [1.5, 1.4, 1.6], 4: [1.3, 0.9, 1.1]})
    result = _run(monkeypatch, fake, [1, 4], repeat=3)
    one, four = render_payoff.bench(result).data["points"]  # type: ignore[index]
    assert fake.order == [1, 1, 1, 4, 4, 4]
    assert one["verdict"] == "pays" and one["speedup_spread"] == [1.4, 1.6], one
    assert four["verdict"] == "unknown" and four["speedup_spread"] == [0.9, 1.3], four
    assert "prompts per run" in four["unknown_reason"], four
    assert result.to_dict()["repeat"] == 3


def test_the_load_client_gets_the_servers_api_key_as_vllm_bench_serve_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`payoff sweep -- ... --api-key K` gave the client no key, so every request
    after k = 0's load was answered 401. vLLM's client sends OPENAI_API_KEY as its Bearer token:
    each request to the client process carries it (bench_client.environment puts it over the
    client's environment for that request only)."""
    import json as json_mod

    from vllm_patcher.load import vllm_bench as bench_mod
    from vllm_patcher.serving import client as client_mod

    fake = tmp_path / "client.py"
    fake.write_text(
        "import json, sys\n"
        "for n, line in enumerate(sys.stdin):\n"
        f"    path = {str(tmp_path)!r} + f'/result-{{n}}.json'\n"
        "    request = json.loads(line)\n"
        "    open(path, 'w').write(json.dumps({'completed': 1, 'env': request['env']}))\n"
        "    print(json.dumps({'id': request['id'], 'result_file': path}), flush=True)\n"
    )
    monkeypatch.setattr(client_mod, "SCRIPT", fake)
    with client_mod.session(sys.executable):
        keyed = bench_mod.client(sys.executable, ["--x"], api_key="K")
        plain = bench_mod.client(sys.executable, ["--x"])
    assert keyed == {"completed": 1, "env": {"OPENAI_API_KEY": "K"}}
    assert plain == {"completed": 1, "env": {}}  # no key: the environment as it is
    assert json_mod.loads((tmp_path / "result-1.json").read_text())["env"] == {}


def test_a_load_client_killed_by_a_signal_is_named_not_its_last_progress_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helper-41: the one client of a command, killed under a run (the OOM killer), was reported
    by its last stderr line, a progress bar ("  2%|▏ | 4/200 ...")."""
    from vllm_patcher.errors import ServerUnreachable
    from vllm_patcher.load import vllm_bench as bench_mod
    from vllm_patcher.serving import client as client_mod

    fake = tmp_path / "client.py"
    fake.write_text(
        "import json, os, signal, sys\n"
        "for line in sys.stdin:\n"
        "    print(json.dumps({'id': json.loads(line)['id'], 'taken': True}), flush=True)\n"
        "    print('  2%|  | 4/200 [00:01<00:56,  3.45it/s]', file=sys.stderr, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.setattr(client_mod, "SCRIPT", fake)
    with pytest.raises(ServerUnreachable) as caught:
        bench_mod.client(sys.executable, ["--x"])
    assert caught.value.message == "vllm bench serve's client was killed by signal 9"


def test_bench_measures_the_plain_servers_spread_over_its_repeats() -> None:
    p = point(1, 2, [1.2, 1.2])
    p.runs[0].base.update({"mean_tpot_ms": 10.0, "output_throughput": 100.0})
    p.runs[1].base.update({"mean_tpot_ms": 12.0, "output_throughput": 100.0})
    assert base_noise(p.runs) == pytest.approx(2 / 11)
    assert base_noise(p.runs[:1]) == 0.0


# 8. payoff bench on SIGTERM or SIGHUP
DRIVER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.payoff.scrapes import http_server, metrics
from vllm_patcher.serving import client
from vllm_patcher.cli import main
from types import SimpleNamespace
from vllm_patcher.cli.base import Options
client.SCRIPT = Path(sys.argv[1])  # a load client that loads nothing and never ends
Options.vllm_target = lambda self, what: SimpleNamespace(python=sys.executable)
body = metrics(per_pos=(0.0, 0.0)).encode()
with http_server(lambda n: (200, "text/plain", body)) as url, \
        http_server(lambda n: (200, "text/plain", body)) as base:
    main(["payoff", "bench", url, "--baseline-url", base, "--concurrency", "1"],
         prog_name="vllm-patcher")
"""


CLIENT = (
    "import os, time; open(os.environ['PID_FILE'], 'w').write(str(os.getpid())); time.sleep(600)"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_payoff_bench_stopped_by_a_signal_stops_its_client_and_exits_130(
    tmp_path: Path, sig: signal.Signals
) -> None:
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    pid_file = tmp_path / "client.pid"
    tool = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(client), str(REPO)], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PID_FILE": str(pid_file), "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert tool.poll() is None, tool.communicate()
            assert time.monotonic() < deadline, "the client never started"
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        tool.send_signal(sig)
        out, err = tool.communicate(timeout=60)
        assert tool.returncode == 130, err
        assert "the load client is stopped" in err and "Traceback" not in err
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        if tool.poll() is None:
            tool.kill()


def test_no_drafts_because_every_request_failed_says_the_requests_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tryout: a prompt longer than --max-model-len is answered 400, so nothing is drafted;
    payoff bench said 'is it the speculative server?' and sent the user to check the URLs."""
    from vllm_patcher.errors import NoDrafts

    quiet = metrics(per_pos=(0.0, 0.0))
    monkeypatch.setattr(
        engine, "client", lambda *a, **k: {"num_prompts": 8, "completed": 0, "failed": 8}
    )
    monkeypatch.setattr(engine, "check_client_args", lambda python, argv: None)
    monkeypatch.setattr(
        scrape, "fetch", lambda url, timeout=10.0: scrape.parse(quiet, url, time.time())
    )
    with pytest.raises(NoDrafts, match="but 8 of 8 requests failed.*--max-model-len"):
        bench.run(sys.executable, SPEC, BASE, [1], 8, "random")
    assert failed_note([{"num_prompts": 8, "completed": 8, "failed": 0}]) == ""


def test_ctrl_c_while_the_rows_are_judged_is_the_benchs_interruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_patcher.errors import BenchInterrupted

    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "analyse", interrupted)
    with pytest.raises(BenchInterrupted, match="the load client is stopped"):
        _run(monkeypatch, FakeServers({1: [1.5]}), [1])


@pytest.mark.parametrize(
    ("url", "baseline", "said"),
    [
        ("afile", "http://127.0.0.1:10", "URL 'afile': give the server's http://"),
        ("http://127.0.0.1:9", "ftp://x", "--baseline-url 'ftp://x': give the server's http://"),
        ("http://127.0.0.1:9", "http://127.0.0.1:9/", "given as both servers"),
    ],
)
def test_the_two_urls_are_refused_before_any_load_unless_two_http_servers(
    url: str, baseline: str, said: str
) -> None:
    """The tryout: a file name as URL printed "warming afile up" and failed under the load (exit
    18), and the same server given twice was measured against itself."""
    from ..conftest import assert_refused, run_cli

    assert_refused(run_cli("payoff", "bench", url, "--baseline-url", baseline), 2, said)
