"""serving.client, the launcher of the load client, asserted on what it returns and on the
processes it leaves: the client's answer comes back, and its whole process group, a grandchild
included, is gone after a watch's stop, a timeout, a Ctrl-C and the client's own end. Small
scripts of our own stand in for vLLM's benchmark client (the launcher's work is the same)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher import runtime
from vllm_patcher.serving import client

from .procs import alive

ANSWERS = """
import json, os, sys, time
for line in sys.stdin:
    request = json.loads(line)
    sys.stderr.write("vllm-patcher: request taken\\n")
    print(json.dumps({"id": request["id"], "taken": True}), flush=True)
    if request["argv"] == ["--slow"]:
        time.sleep(300)
    if request["argv"] == ["--bad"]:
        answer = {"usage": "usage: vllm bench serve\\nvllm bench serve: error: no --bad\\n"}
    elif request["argv"] == ["--chatty"]:  # lines that are not this request's answer
        print("not json\\n[1]\\n" + json.dumps({"id": request["id"] + 7, "result_file": "x"}))
        answer = {"mine": True}
    elif request["argv"] == ["--dies"]:  # taken, then the process dies: this run failed
        print("dying", file=sys.stderr, flush=True)
        sys.exit(3)
    else:
        print(f"run {request['id']} says", file=sys.stderr, flush=True)
        answer = {"request": request, "pid": os.getpid(), "own_group": os.getpgid(0) == os.getpid()}
    print(json.dumps({"id": request["id"], **answer}), flush=True)
    if os.environ.get("EXIT_AFTER") == str(request["id"]):
        sys.exit(0)  # answered, then gone: the next request finds it on its way out
"""
# a child that starts a grandchild in its group, writes both pids, then waits (or ends: ENDS)
FAMILY = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(os.environ["PIDS"], "w").write(f"{os.getpid()} {grandchild.pid}")
if os.environ.get("ENDS") != "1":
    time.sleep(300)
"""


def _client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str) -> None:
    script = tmp_path / "fake_client.py"
    script.write_text(source)
    monkeypatch.setattr(client, "SCRIPT", script)


def _pids(path: Path) -> list[int]:
    text = path.read_text() if path.exists() else ""
    return [int(p) for p in text.split()]


def _all_gone(pids: list[int], within_s: float = 10.0) -> bool:
    """Every pid dead (a zombie is, until init reaps it: the grandchild's parent died first)."""
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    """Where the client writes its pid and its grandchild's; what a failed test left running is
    killed after it."""
    path = tmp_path / "pids"
    yield path
    for pid in _pids(path):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _family(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pid_file: Path, ends: bool = False
) -> None:
    _client(monkeypatch, tmp_path, FAMILY)
    monkeypatch.setenv("PIDS", str(pid_file))
    monkeypatch.setenv("ENDS", "1" if ends else "0")


def test_the_clients_answer_comes_back_from_its_own_group_with_the_api_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    run = client.run(sys.executable, ["--num-prompts", "4"], api_key="K")
    assert isinstance(run, runtime.ScriptRun) and run.returncode == 0 and run.answer is not None
    assert run.answer["request"] == {"argv": ["--num-prompts", "4"], "id": 1,
                                     "env": {"OPENAI_API_KEY": "K"}, "fresh": True}  # fmt: skip
    assert run.answer["own_group"] is True
    assert _all_gone([run.answer["pid"]])  # no session: the process ends with its one run
    no_key = client.run(sys.executable, []).answer
    assert no_key is not None and no_key["request"] == {
        "argv": [],
        "env": {},
        "id": 1,
        "fresh": True,
    }


def test_a_check_asks_the_client_to_parse_only_and_a_usage_error_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    run = client.check(sys.executable, ["--dataset-name", "random"])
    assert run.answer is not None
    assert run.answer["request"] == {"argv": ["--dataset-name", "random"], "check": True, "id": 1}
    refused = client.check(sys.executable, ["--bad"])
    assert refused.returncode == 2 and refused.answer is None
    assert refused.stderr_tail() == "vllm bench serve: error: no --bad"


def test_a_session_asks_one_process_for_every_run_and_stops_it_at_its_end(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    with client.session(sys.executable) as opened:
        with client.session(sys.executable) as inner:  # a block inside another reuses it
            assert inner is opened
        runs = [client.check(sys.executable, []), *(client.run(sys.executable, []) for _ in "ab")]
        pids = {r.answer["pid"] for r in runs if r.answer}
        assert len(pids) == 1 and len(runs) == 3
        [pid] = pids
        assert alive(pid)  # between runs it waits for the next one
    assert _all_gone([pid])


def test_a_run_after_a_stopped_one_gets_a_new_process_in_the_same_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    with client.session(sys.executable):
        first = client.run(sys.executable, []).answer
        assert first is not None

        def watch() -> str | None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):  # a Ctrl-C while a run is under way
            client.run(sys.executable, ["--slow"], watch=watch, watch_every_s=0.1)
        assert _all_gone([first["pid"]])
        second = client.run(sys.executable, []).answer
        assert second is not None and second["pid"] != first["pid"]


def test_a_watch_that_names_a_reason_stops_the_whole_group_grandchild_included(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pid_file: Path
) -> None:
    _family(monkeypatch, tmp_path, pid_file)
    looks: list[list[int]] = []

    def watch() -> str | None:
        looks.append(_pids(pid_file))
        return "stuck" if len(looks[-1]) == 2 else None

    started = time.monotonic()
    with pytest.raises(runtime.ScriptStopped) as caught:
        client.run(sys.executable, [], watch=watch, watch_every_s=0.1)
    assert caught.value.reason == "stuck" and time.monotonic() - started < 60
    child, grandchild = looks[-1]
    assert _all_gone([child, grandchild])
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # reaped, not only dead


def test_a_timeout_stops_the_whole_group_grandchild_included(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pid_file: Path
) -> None:
    _family(monkeypatch, tmp_path, pid_file)
    with pytest.raises(runtime.ScriptNotRun) as caught:
        client.run(sys.executable, [], timeout_s=3)
    assert caught.value.timed_out
    pids = _pids(pid_file)
    assert len(pids) == 2 and _all_gone(pids)


def test_a_ctrl_c_while_the_client_runs_stops_the_whole_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pid_file: Path
) -> None:
    _family(monkeypatch, tmp_path, pid_file)

    def watch() -> str | None:
        if len(_pids(pid_file)) == 2:
            raise KeyboardInterrupt  # where a Ctrl-C lands: the tool's main thread, waiting
        return None

    with pytest.raises(KeyboardInterrupt):
        client.run(sys.executable, [], watch=watch, watch_every_s=0.1)
    pids = _pids(pid_file)
    assert len(pids) == 2 and _all_gone(pids)


def test_what_the_client_leaves_behind_at_its_own_end_goes_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pid_file: Path
) -> None:
    _family(monkeypatch, tmp_path, pid_file, ends=True)
    run = client.run(sys.executable, [], timeout_s=120)
    assert run.returncode == 0
    child, grandchild = _pids(pid_file)
    assert _all_gone([child, grandchild])


def test_a_requests_environment_is_the_clients_own_with_the_requests_over_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_patcher.intarget.scripts.bench_client import use_environment

    for name in list(os.environ):  # monkeypatch puts the test process's environment back
        monkeypatch.delenv(name)
    own = {"PATH": "/bin", "OPENAI_API_KEY": "the user's"}
    use_environment(own, {"env": {"OPENAI_API_KEY": "K"}})
    assert dict(os.environ) == {"PATH": "/bin", "OPENAI_API_KEY": "K"}
    use_environment(own, {"argv": []})  # an earlier request's key does not carry over
    assert dict(os.environ) == own
    use_environment({"PATH": "/bin"}, {"env": {"OPENAI_API_KEY": "K"}})
    use_environment({"PATH": "/bin"}, {})
    assert dict(os.environ) == {"PATH": "/bin"}


def test_lines_that_are_not_the_requests_answer_are_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    with client.session(sys.executable):
        assert client.run(sys.executable, ["--chatty"]).answer == {"id": 1, "mine": True}
        after = client.run(sys.executable, []).answer  # the stray id-8 line answers nothing
        assert after is not None and after["id"] == 2 and after["request"]["argv"] == []


def test_a_run_whose_client_dies_fails_with_its_own_exit_and_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    with client.session(sys.executable) as opened:
        first = client.run(sys.executable, []).answer
        assert first is not None
        died = client.run(sys.executable, ["--dies"])
        assert died.returncode == 3 and died.answer is None
        assert died.stderr == "dying\n"  # not the first run's "run 1 says"
        assert _all_gone([first["pid"]]) and opened.proc is None
        again = client.run(sys.executable, []).answer  # the next run gets a new process
        assert again is not None and again["pid"] != first["pid"]


def test_a_client_that_ended_after_its_answer_is_replaced_and_the_request_sent_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _client(monkeypatch, tmp_path, ANSWERS)
    monkeypatch.setenv("EXIT_AFTER", "1")
    with client.session(sys.executable):
        first = client.run(sys.executable, []).answer
        second = client.run(sys.executable, ["--again"]).answer
    assert first is not None and second is not None
    assert second["request"]["argv"] == ["--again"] and second["pid"] != first["pid"]
    assert _all_gone([first["pid"], second["pid"]])


def test_a_vllm_without_the_benchmark_client_answers_each_request_with_why() -> None:
    """The real bench_client in an interpreter with no vLLM (this one): it stays to say so."""
    with client.session(sys.executable) as opened:
        runs = [client.check(sys.executable, []), client.run(sys.executable, ["--x"])]
        assert opened.proc is not None and opened.proc.poll() is None
    for run in runs:
        assert run.returncode == 3 and run.answer is not None
        assert "this vLLM has no benchmark client: ModuleNotFoundError" in run.answer["error"]


def test_the_client_script_marks_a_taken_request_as_the_launcher_reads_it() -> None:
    from vllm_patcher.intarget.scripts import bench_client

    assert bench_client.TAKEN_LINE == client.TAKEN_LINE


# vLLM's benchmark module as the real bench_client.py reads it, standing in so the fork's work is
# seen (its pid, its parent's) and can be killed or held; tests/e2e/test_sweep_engine.py runs the
# same script on vLLM's own client
BENCHMARK = """
import json, os, signal, time
def add_cli_args(parser):
    parser.add_argument("--result-dir", default=".")
    parser.add_argument("--result-filename", default="r.json")
    parser.add_argument("--then", default="")
def main(args):
    path = os.path.join(args.result_dir, args.result_filename)
    with open(path + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "parent": os.getppid()}, f)
    os.rename(path + ".tmp", path)
    if args.then == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if args.then == "hold":
        time.sleep(300)
    if args.then == "vanish":  # ends before its answer, with exit code 0
        os._exit(0)
"""


def _benchmark_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = tmp_path / "stand-in"
    for folder, source in (("vllm/benchmarks", BENCHMARK), ("vllm/utils", "")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")
        (root / folder / ("serve.py" if source else "argparse_utils.py")).write_text(
            source or "from argparse import ArgumentParser as FlexibleArgumentParser\n"
        )
    (root / "vllm" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(root))


def _result(tmp_path: Path, name: str) -> dict[str, int]:
    import json

    return dict(json.loads((tmp_path / name).read_text()))


def test_each_run_is_a_fork_of_the_sessions_client_and_a_killed_fork_fails_only_its_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real bench_client.py: vLLM imported once by the session's process, each run a process
    of its own forked from it, ended with its run; a fork killed by a signal is that run's error,
    the session's process answers the next run."""
    _benchmark_module(monkeypatch, tmp_path)
    argv = ["--result-dir", str(tmp_path), "--result-filename"]
    with client.session(sys.executable) as opened:
        assert client.check(sys.executable, argv + ["x"]).answer == {"id": 1, "parsed": True}
        assert opened.proc is not None
        own = opened.proc.pid
        runs = [client.run(sys.executable, argv + [name]) for name in ("a", "b")]
        assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
        a, b = _result(tmp_path, "a"), _result(tmp_path, "b")
        assert a["parent"] == b["parent"] == own and len({a["pid"], b["pid"], own}) == 3
        assert _all_gone([a["pid"], b["pid"]])
        killed = client.run(sys.executable, argv + ["c", "--then", "die"])
        assert killed.returncode == 3 and killed.answer is not None
        assert killed.answer["error"] == "vllm bench serve's process was killed by signal 9"
        vanished = client.run(sys.executable, argv + ["e", "--then", "vanish"]).answer
        assert vanished == {
            "id": 5, "error": "vllm bench serve's process ended with exit code 0 before its answer"
        }  # fmt: skip
        after = client.run(sys.executable, argv + ["d"])
        assert after.returncode == 0 and opened.proc is not None and opened.proc.pid == own
        assert _result(tmp_path, "d")["parent"] == own
    assert _all_gone([own])


def test_a_fork_ends_when_the_sessions_client_is_killed_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A SIGKILL of the client process alone (not its group): the fork holding its run ends with
    it (PR_SET_PDEATHSIG), and the run fails."""
    import threading

    _benchmark_module(monkeypatch, tmp_path)
    argv = ["--result-dir", str(tmp_path), "--result-filename", "held", "--then", "hold"]
    with client.session(sys.executable) as opened:
        ran: list[runtime.ScriptRun] = []
        thread = threading.Thread(target=lambda: ran.append(client.run(sys.executable, argv)))
        thread.start()
        deadline = time.monotonic() + 60
        while not (tmp_path / "held").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        held = _result(tmp_path, "held")
        os.kill(held["parent"], signal.SIGKILL)
        thread.join(timeout=60)
        assert ran and ran[0].returncode != 0 and ran[0].answer is None
        assert _all_gone([held["pid"], held["parent"]]) and opened.proc is None
