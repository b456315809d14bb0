"""Progress on stderr: a live line on a terminal, one finished line per step when piped, nothing
under --json; verify's early stop after a failed state tier; the lock wait's one line; the target
line of apply and verify."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher import progress
from vllm_patcher.patching.verify import Check

from ..conftest import MINIMAX_CHECKS, run_cli

ELAPSED = r"(\d+\.\d s|< 0\.1 s)"
ESCAPE = "\x1b"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VLLM_PATCHER_PATCHES_DIR", None)
    env.pop("VIRTUAL_ENV", None)
    env["TERM"] = "xterm"  # a terminal that is not `dumb`, whatever runs the tests
    env.update(extra)
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_patcher", *args]


def _with_tty_stderr(*args: str) -> tuple[int, str, str]:
    """Run the real CLI with stderr on a pseudo-terminal and stdout on a pipe."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        _cli(*args), stdout=subprocess.PIPE, stderr=follower, env=_env(), text=True
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    out, _ = proc.communicate(timeout=600)
    # the terminal turns "\n" into "\r\n"; put the program's own line ends back
    return proc.returncode, out, b"".join(chunks).decode().replace("\r\n", "\n")


def _piped(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(*args), capture_output=True, text=True, env=_env(**env), timeout=600, check=False
    )


# --- the module ------------------------------------------------------------------------------------


def test_plain_mode_prints_one_finished_line_per_step_and_never_a_carriage_return() -> None:
    out = io.StringIO()
    steps = progress.Progress(progress.PLAIN, prefix="verify", stream=out)
    steps.step("compile tier")
    assert out.getvalue() == "", "a piped step printed something before it ended"
    steps.step("state tier")  # ends the compile tier
    steps("a message")
    assert steps.done() is not None
    assert steps.done() is None  # nothing open any more
    lines = out.getvalue().splitlines()
    assert re.fullmatch(rf"verify: compile tier \.\.\. {ELAPSED}", lines[0]), lines
    assert lines[1] == "verify: a message"
    assert re.fullmatch(rf"verify: state tier \.\.\. {ELAPSED}", lines[2]), lines
    assert len(lines) == 3 and "\r" not in out.getvalue() and ESCAPE not in out.getvalue()


def test_tty_mode_shows_the_step_at_once_and_finishes_the_same_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "TICK", 0.05)
    out = io.StringIO()
    steps = progress.Progress(progress.TTY, prefix="verify", stream=out)
    with steps.step("import and behaviour tiers"):
        assert out.getvalue() == "verify: import and behaviour tiers ..."
        time.sleep(0.3)  # lets the in-place count tick; the test asserts no duration
        steps("waiting for something")  # continues on a line of its own
    text = out.getvalue()
    assert "\rverify: import and behaviour tiers ... 0 s" in text
    assert "\nverify: waiting for something\n" in text
    assert re.search(rf"\nverify: import and behaviour tiers \.\.\. {ELAPSED}\n$", text), text
    assert ESCAPE not in text


def test_an_exception_inside_a_step_still_ends_its_line() -> None:
    out = io.StringIO()
    steps = progress.Progress(progress.PLAIN, stream=out)
    with pytest.raises(KeyboardInterrupt), steps.step("state tier"):
        raise KeyboardInterrupt
    assert re.fullmatch(rf"state tier \.\.\. {ELAPSED} \(interrupted\)\n", out.getvalue())


def test_off_mode_prints_nothing() -> None:
    out = io.StringIO()
    steps = progress.Progress(progress.OFF, prefix="verify", stream=out)
    steps.step("compile tier")
    steps("a message")
    steps.done()
    assert out.getvalue() == ""


# --- the CLI on a pristine release tree ------------------------------------------------------------


def test_verify_on_a_terminal_shows_each_tier_with_its_time_and_stops_after_state(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")  # nothing applied: every patch is pending
    code, out, err = _with_tty_stderr("--target", str(site), "verify")
    assert code == 1, (out, err)
    for tier in ("compile", "state"):
        line = rf"verify: {tier} tier \.\.\."
        # shown at once, counted in place while it runs (a loaded machine), finished in place
        assert re.search(rf"^{line}(\r{line} \d+ s)*\r{line} {ELAPSED}$", err, re.M), err
    assert "import and behaviour" not in err, "verify ran the import tier on a pending tree"
    assert out.splitlines()[0] == f"target: {site} (--target)"
    assert out.splitlines()[-1] == (
        f"verify: FAILED: stopped after the state tier; run "
        f"`vllm-patcher --target {site} apply` first, then verify again"
    )
    assert "  import     not-run (a patch is not in the files yet)" in out


def test_verify_piped_prints_plain_finished_lines_only(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    proc = _piped("--target", str(site), "verify")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert re.fullmatch(rf"verify: compile tier \.\.\. {ELAPSED}", lines[0]), lines
    assert re.fullmatch(rf"verify: state tier \.\.\. {ELAPSED}", lines[1]), lines
    assert "\r" not in proc.stderr + proc.stdout and ESCAPE not in proc.stderr + proc.stdout


def test_verify_json_on_a_terminal_prints_no_progress_and_says_what_did_not_run(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    site = tree_copy("0.15.1")
    code, out, err = _with_tty_stderr("--target", str(site), "--json", "verify")
    assert code == 1 and err == ""
    report = json.loads(out)
    assert report["tiers"] == {
        "compile": "passed",
        "state": "failed",
        "import": "not-run",
        "behaviour": "not-run",
    }
    assert report["not_run"] == dict.fromkeys(
        ("import", "behaviour"), "a patch is not in the files yet"
    )
    assert report["fix"] == f"vllm-patcher --target {site} apply"
    assert {c["tier"] for c in report["checks"]} == {"compile", "state"}


def test_verify_after_apply_runs_past_state_on_a_bare_tree(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    applied = _piped("--target", str(site), "apply")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines()[0] == f"target: {site} (--target)"
    assert applied.stderr == ""  # nothing to wait for, nothing to say
    report = json.loads(_piped("--target", str(site), "--json", "verify").stdout)
    assert report["ok"] is True and report["fix"] is None
    assert report["not_run"] == dict.fromkeys(("import", "behaviour"), "no interpreter (--target)")
    # its text says what that OK covers: a bare tree is never proven to load
    text = _piped("--target", str(site), "verify")
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1].startswith(
        "verify: OK for the compile and state tiers only; import and behaviour not run"
    ), text.stdout


def test_apply_json_and_dry_run_print_no_target_line(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    dry = _piped("--target", str(site), "apply", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("--- a/vllm/"), dry.stdout[:200]
    assert "target:" not in dry.stdout + dry.stderr
    applied = _piped("--target", str(site), "--json", "apply")
    assert json.loads(applied.stdout)["changed"] and applied.stderr == ""


# --- the lock --------------------------------------------------------------------------------------


def _read_line(stream: io.TextIOBase, proc: subprocess.Popen[str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.05)
        if ready:
            return stream.readline()
        assert proc.poll() is None, "the waiter exited instead of waiting"
    raise AssertionError("the waiter said nothing while it waited")


@contextlib.contextmanager
def _holding_the_lock(site: Path, faults: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real apply paused while it holds the lock (fault hook ``pause@locked``); resumed and
    waited for on the way out."""
    faults.mkdir()
    holder = subprocess.Popen(
        _cli("--target", str(site), "apply"),
        env=_env(VLLM_PATCHER_FAULT="pause@locked", VLLM_PATCHER_FAULT_DIR=str(faults)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not (faults / f"reached-{holder.pid}").exists():  # it holds the lock, pid written
            assert holder.poll() is None, "the holder exited before taking the lock"
            time.sleep(0.01)
        yield holder
    finally:
        (faults / "resume").touch()
        holder.wait(timeout=120)


def test_a_run_waiting_for_the_lock_names_the_holder_once_and_succeeds_after(
    tree_copy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    site = tree_copy("0.15.1")
    faults = tmp_path / "faults"
    with _holding_the_lock(site, faults) as holder:
        lock = site / ".vllm-patcher" / "lock"
        taken = time.strftime("%H:%M:%S", time.localtime(lock.stat().st_mtime))
        waiter = subprocess.Popen(
            _cli("--target", str(site), "apply"),
            env=_env(VLLM_PATCHER_LOCK_TIMEOUT="300"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert waiter.stderr is not None
            line = _read_line(waiter.stderr, waiter)
            assert line == (
                f"apply: waiting for the lock {lock} (last taken by pid {holder.pid} at {taken}); "
                "giving up after 300 s\n"
            )
            (faults / "resume").touch()
            assert holder.wait(timeout=120) == 0
            out, err = waiter.communicate(timeout=120)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
    assert waiter.returncode == 0, err
    assert err == "", "the waiter said more than one line about the lock"
    assert out.splitlines()[-1] == "nothing to do"  # it saw what the holder applied


def test_a_json_run_waiting_for_the_lock_prints_nothing_on_stderr(
    tree_copy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    site = tree_copy("0.15.1")
    with _holding_the_lock(site, tmp_path / "faults") as holder:
        waiter = _piped("--target", str(site), "--json", "apply", VLLM_PATCHER_LOCK_TIMEOUT="0.3")
    assert waiter.returncode == 8
    assert waiter.stderr.startswith("vllm-patcher: error: another vllm-patcher holds")
    assert len(waiter.stderr.splitlines()) == 1, waiter.stderr
    assert f"(last taken by pid {holder.pid})" in waiter.stderr


# --- a real vLLM venv ------------------------------------------------------------------------------


def test_verify_stops_before_importing_a_pending_venv_and_names_its_fix(
    vllm_python: Path, pristine_probe: list[Check], tmp_path: Path
) -> None:
    """Chosen through VIRTUAL_ENV: the target line says so, and the fix names the same venv."""
    venv = vllm_python.parent.parent  # the fixture left it pristine: every patch pending
    proc = _piped("verify", VIRTUAL_ENV=str(venv))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"target: {vllm_python} (from VIRTUAL_ENV)"
    fix = f"vllm-patcher --python {vllm_python} apply"
    assert lines[-1] == (
        f"verify: FAILED: stopped after the state tier; run `{fix}` first, then verify again"
    )
    assert "import and behaviour" not in proc.stderr
    report = json.loads(_piped("verify", "--json", VIRTUAL_ENV=str(venv)).stdout)
    assert report["fix"] == fix
    assert report["not_run"] == dict.fromkeys(
        ("import", "behaviour"), "a patch is not in the files yet"
    )
    assert {c["tier"] for c in report["checks"]} == {"compile", "state"}
    # what the stop spares: the probe, run anyway, fails on the unpatched release
    failed = {c.name for c in pristine_probe if not c.ok}
    assert set(MINIMAX_CHECKS) <= failed, failed


def test_verify_on_drifted_files_fails_state_but_goes_on_to_the_next_tiers(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """Only a patch missing from the files stops verify early; edited bytes still get judged."""
    site = tree_copy("0.15.1")
    assert run_cli("--target", str(site), "apply").returncode == 0
    spec = site / "vllm" / "config" / "speculative.py"
    spec.write_text(spec.read_text(encoding="utf-8") + "\n# a local edit\n", encoding="utf-8")
    proc = _piped("--target", str(site), "--json", "verify")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["tiers"]["state"] == "failed"
    # past the state tier: the bare tree has no interpreter, so the slow tiers are skipped, not cut
    assert report["tiers"]["import"] == "skipped", report["tiers"]
    assert report["not_run"]["import"] == "no interpreter (--target)"
    assert report["fix"] is None


def test_verify_while_another_run_holds_the_lock_says_to_wait_not_to_fix(
    tree_copy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    site = tree_copy("0.15.1")
    with _holding_the_lock(site, tmp_path / "faults"):
        proc = _piped("--target", str(site), "verify")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == (
        "verify: FAILED: stopped after the state tier; another vllm-patcher run is changing the "
        "files right now; verify again when it is done"
    ), proc.stdout


def test_verify_on_files_patched_by_hand_names_the_apply_that_records_them(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """unrecorded: the right bytes, no record; apply adopts them (exit 1 until then)."""
    site = tree_copy("0.15.1")
    assert run_cli("--target", str(site), "apply").returncode == 0
    shutil.rmtree(site / ".vllm-patcher")
    proc = _piped("--target", str(site), "verify")
    assert proc.returncode == 1
    fix = f"vllm-patcher --target {site} apply"
    assert proc.stdout.splitlines()[-1] == f"verify: FAILED; `{fix}` fixes the state tier"
    assert run_cli(*fix.split()[1:]).returncode == 0  # pasted, it works
    assert _piped("--target", str(site), "verify").returncode == 0
