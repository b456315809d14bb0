"""The command line's standard streams: a closed stream, a stdout that cannot be written
(``> /dev/full``), a reader that went away and a stderr that cannot be written each leave the work
and the exit code as documented, for our printing and click's alike, never a traceback."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import scratch_tree, states_on
from ..patching.sites import _states

CLI = (sys.executable, "-m", "vllm_patcher")


def _site(tmp_path: Path) -> Path:
    """A pristine vLLM 0.15.1 tree to work on."""
    return scratch_tree("0.15.1", tmp_path / "site")


def test_shell_completion_answers(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--target", str(tmp_path), "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "_VLLM_PATCHER_COMPLETE": "bash_source"},
        check=False,
    )
    assert proc.returncode == 0 and "complete" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_stream_changes_neither_the_work_nor_the_exit_code(
    tmp_path: Path, closed: str
) -> None:
    """``>&-``: apply still applies and exits 0, a refusal keeps its code."""
    site = _site(tmp_path)
    redirect = ">&-" if closed == "stdout" else "2>&-"
    codes = {}
    for args in (["apply"], ["apply", "no-such-patch"], ["status", "--check"]):
        proc = subprocess.run(
            ["bash", "-c", f'"$@" {redirect}', "_", *CLI, "--target", str(site), *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        codes[args[-1]] = proc.returncode
    assert (site / ".vllm-patcher" / "state.json").is_file()  # the apply was done
    assert codes == {"apply": 0, "no-such-patch": 2, "--check": 0}


def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_6_not_a_traceback(
    tmp_path: Path,
) -> None:
    """``> /dev/full``: the output is lost, so the exit code is 6 with one line saying so, and
    the run stops at its first line of output: a plain apply (which names its target first)
    changes nothing, one with --json (which prints at the end) and a revert are done whole; a
    refusal keeps its own code and line."""
    site = _site(tmp_path)
    lost = "vllm-patcher: error: cannot write to standard output: No space left on device;"
    for args, code, line, applied in (
        (["apply"], 6, lost, False),
        (["--json", "apply"], 6, lost, True),
        (["--json", "status"], 6, lost, True),
        (["--json", "apply", "no-such-patch"], 2, "vllm-patcher: error: no patch named", True),
        (["revert"], 6, lost, False),
    ):
        proc = subprocess.run(
            ["bash", "-c", '"$@" > /dev/full', "_", *CLI, "--target", str(site), *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == code, (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1, (args, proc.stderr)
        assert proc.stderr.startswith(line), (args, proc.stderr)
        assert (site / ".vllm-patcher" / "state.json").is_file() is applied, args
    # click's own printing (help, version) meets the same rule; a usage error keeps its code
    for args, code, line in (
        (["list"], 6, lost),
        (["--help"], 6, lost),
        (["--version"], 6, lost),
        (["--json", "--help"], 6, lost),
        (["status", "--help"], 6, lost),
        (["doctor", "--help"], 6, lost),
        (["--json", "--bogus", "status"], 2, "vllm-patcher: error: No such option '--bogus'"),
        (["--json", "apply", "--bogus"], 2, "vllm-patcher: error: No such option '--bogus'"),
        (["--json", "nosuchcmd"], 2, "vllm-patcher: error: No such command 'nosuchcmd'"),
    ):
        proc = subprocess.run(
            ["bash", "-c", '"$@" > /dev/full', "_", sys.executable, "-m", "vllm_patcher", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stderr.startswith(line) and len(proc.stderr.splitlines()) == 1, (args, proc)
    # an ASCII stdout, which click writes through its binary buffer: the same rule
    for args in (["--help"], ["apply", "--help"]):
        proc = subprocess.run(
            ["bash", "-c", '"$@" > /dev/full', "_", sys.executable, "-m", "vllm_patcher", *args],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONIOENCODING": "ascii"},
        )  # fmt: skip
        assert (proc.returncode, proc.stderr[: len(lost)]) == (6, lost), (args, proc.stderr)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_reader_that_went_away_is_no_failure_for_click_either(stream: str) -> None:
    """A pipe whose reader has gone: --help still exits 0 and a usage error 2 (not click's 1)."""
    for args, code in ((["--help"], 0), (["nosuchcmd"], 2), (["apply", "--bogus"], 2)):
        read, write = os.pipe()
        os.close(read)  # gone before the first byte: every write is a broken pipe
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "vllm_patcher", *args],
                stdout=write if stream == "stdout" else subprocess.DEVNULL,
                stderr=write if stream == "stderr" else subprocess.PIPE,
                text=True, check=False,
            )  # fmt: skip
        finally:
            os.close(write)
        assert proc.returncode == code, (stream, args, proc.stderr)
        assert stream == "stderr" or "Traceback" not in proc.stderr, proc.stderr


def test_a_stderr_that_cannot_be_written_changes_neither_the_work_nor_the_exit_code(
    tmp_path: Path,
) -> None:
    """``2> /dev/full``: diagnostics have nowhere to go, so they fall silent; apply, verify and
    revert do their work and exit as usual (waiting for a lock too), usage errors keep exit 2."""
    site = _site(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", '"$@" 2> /dev/full', "_", sys.executable, "-m", "vllm_patcher", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    for args, code in ((["apply", "--bogus"], 2), (["nosuchcmd"], 2), ([], 2)):
        assert run("--target", str(site), *args).returncode == code, args
    lock = site / ".vllm-patcher" / "lock"
    lock.parent.mkdir()
    lock.touch()
    with open(lock, "r+") as held:  # another run holds the lock for a second: apply waits
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = subprocess.Popen(
            ["bash", "-c", '"$@" 2> /dev/full', "_", sys.executable, "-m", "vllm_patcher",
             "--target", str(site), "apply"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(1.0)
        fcntl.flock(held, fcntl.LOCK_UN)
    out, _ = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, out
    assert (site / ".vllm-patcher" / "state.json").is_file()
    verify = run("--target", str(site), "verify")
    assert verify.returncode == 0 and verify.stdout.splitlines()[-1].startswith("verify: OK"), (
        verify
    )
    assert run("--target", str(site), "revert").returncode == 0
    assert not (site / ".vllm-patcher" / "state.json").exists()


def _with_reader_gone(site: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with a stdout whose reader is gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "vllm_patcher", "--target", str(site), command],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)


def test_a_reader_gone_after_a_committed_apply_keeps_exit_code_0(tmp_path: Path) -> None:
    """`vllm-patcher apply | head -0`: the files are patched, so the run succeeded."""
    site = _site(tmp_path)
    proc = _with_reader_gone(site, "apply")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert _states(site) == set(states_on("0.15.1", "applied"))


def test_a_reader_gone_never_turns_a_failing_verify_green(tmp_path: Path) -> None:
    site = _site(tmp_path)  # nothing applied: the state tier fails
    assert _with_reader_gone(site, "verify").returncode == 1
