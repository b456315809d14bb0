"""The click-free path of status, apply and revert (vllm_patcher/cli/fast.py): it takes exactly
the options click declares for them, hands every other command line to click, and on the forms it
takes prints, refuses and exits byte for byte as click's path does on the same tree."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from vllm_patcher.cli import fast
from vllm_patcher.cli.root import main as root_group
from vllm_patcher.wheels import sources

# Runs one command line through the chosen path in a fresh interpreter.
_RUN = """
import sys
path, args = sys.argv[1], sys.argv[2:]
if path == "click":
    from vllm_patcher.cli.root import main
    main.main(args, prog_name="vllm-patcher")
else:
    from vllm_patcher.cli.fast import parse, run
    parsed = parse(args)
    assert parsed is not None, args
    run(args, parsed)
"""


def _declared(command: click.Command) -> tuple[set[str], set[str], bool]:
    """A click command's own flags, its options that take a value, and whether it takes NAMES."""
    flags, valued, names = set(), set(), False
    for p in command.params:
        if isinstance(p, click.Argument):
            names = True
        elif isinstance(p, click.Option) and p.name and not p.name.startswith("g_"):
            (flags if p.is_flag else valued).update(p.opts)
    return flags, valued, names


def test_the_fast_table_is_what_click_declares_for_the_three_commands() -> None:
    ctx = click.Context(root_group)
    root_flags, root_valued, _ = _declared(root_group)
    assert root_valued == set(fast.GLOBAL_VALUES)
    assert root_flags - {"--version", "-h", "--help"} == {fast.GLOBAL_FLAG}
    for name in fast.FLAGS:
        command = root_group.get_command(ctx, name)
        assert command is not None
        flags, valued, names = _declared(command)
        assert flags == set(fast.FLAGS[name]), name
        assert valued == set()
        assert names == (name in fast.TAKES_NAMES)
        # the global options after the command are the root's, with the same flags
        after = {o for p in command.params if p.name and p.name.startswith("g_") for o in p.opts}
        assert after == {*fast.GLOBAL_VALUES, fast.GLOBAL_FLAG}


def test_the_global_options_value_types_are_the_ones_fast_mirrors() -> None:
    """fast reads --python and --target as plain strings and --patches as click.Path(path_type=
    Path) with click's defaults (it hands an existing but unreadable one to click, which refuses
    it): a change to these declarations must change fast too."""
    types = {o: p.type for p in root_group.params for o in p.opts if o in fast.GLOBAL_VALUES}
    assert types["--python"] == click.STRING and types["--target"] == click.STRING
    patches = types["--patches"]
    assert isinstance(patches, click.Path)
    assert (patches.exists, patches.readable, patches.writable) == (False, True, False)
    assert (patches.file_okay, patches.dir_okay, patches.type) == (True, True, Path)


def test_shell_completion_is_left_to_click(tmp_path: Path) -> None:
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
    """``>&-``: apply still applies and exits 0, a refusal keeps its code, on both paths."""
    site = tmp_path / "site"
    redirect = ">&-" if closed == "stdout" else "2>&-"
    codes = {}
    for path in ("fast", "click"):
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(
            sources.fetch_release("0.15.1"), site, ignore=shutil.ignore_patterns(".complete")
        )
        for args in (["apply"], ["apply", "no-such-patch"], ["status", "--check"]):
            proc = subprocess.run(
                ["bash", "-c", f'"$@" {redirect}', "_", sys.executable, "-c", _RUN, path,
                 "--target", str(site), *args],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            codes[(path, args[-1])] = proc.returncode
        assert (site / ".vllm-patcher" / "state.json").is_file()  # the apply was done
    assert codes == {
        (p, a): c
        for p in ("fast", "click")
        for a, c in (("apply", 0), ("no-such-patch", 2), ("--check", 0))
    }


def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_6_not_a_traceback(
    tmp_path: Path,
) -> None:
    """``> /dev/full``: the output is lost, so the exit code is 6 with one line saying so, and
    the run stops at its first line of output: a plain apply (which names its target first)
    changes nothing, one with --json (which prints at the end) and a revert are done whole; a
    refusal keeps its own code and line."""
    site = tmp_path / "site"
    lost = "vllm-patcher: error: cannot write to standard output: No space left on device;"
    for path in ("fast", "click"):
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(
            sources.fetch_release("0.15.1"), site, ignore=shutil.ignore_patterns(".complete")
        )
        for args, code, line, applied in (
            (["apply"], 6, lost, False),
            (["--json", "apply"], 6, lost, True),
            (["--json", "status"], 6, lost, True),
            (["--json", "apply", "no-such-patch"], 2, "vllm-patcher: error: no patch named", True),
            (["revert"], 6, lost, False),
        ):
            proc = subprocess.run(
                ["bash", "-c", '"$@" > /dev/full', "_", sys.executable, "-c", _RUN, path,
                 "--target", str(site), *args],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert proc.returncode == code, (path, args, proc.stderr)
            assert len(proc.stderr.splitlines()) == 1, (path, args, proc.stderr)
            assert proc.stderr.startswith(line), (path, args, proc.stderr)
            assert (site / ".vllm-patcher" / "state.json").is_file() is applied, (path, args)
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
    site = tmp_path / "site"
    shutil.copytree(
        sources.fetch_release("0.15.1"), site, ignore=shutil.ignore_patterns(".complete")
    )

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


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["status", "-h"],
        ["--version"],
        ["verify"],
        ["status", "extra"],
        ["revert", "name"],
        ["status", "--check=1"],
        ["--json=yes", "status"],
        ["status", "--target"],
        ["status", "--target", "--json"],
        ["--target=-x", "status"],
        ["apply", "--", "name"],
        ["apply", "-"],
        ["status", "--dry-run"],
        ["--check", "status"],
        ["--target", "status"],
        ["statu"],
        ["apply", "--unknown"],
    ],
)
def test_every_other_command_line_goes_to_click(argv: list[str]) -> None:
    assert fast.parse(argv) is None


def test_the_forms_it_takes_are_read_as_click_reads_them() -> None:
    parsed = fast.parse(
        ["--json", "--target=A", "apply", "one", "--dry-run", "--patches", "P", "two", "--strict"]
    )
    assert parsed is not None
    assert (parsed.command, parsed.flags, parsed.names) == (
        "apply",
        {"--dry-run", "--strict"},
        ["one", "two"],
    )
    assert (parsed.before.as_json, parsed.before.directory, parsed.before.patches) == (
        True,
        ["A"],
        [],
    )
    assert (parsed.after.as_json, parsed.after.patches) == (False, ["P"])


# Each case: the command line after --target SITE, and the environment it runs in.
CASES = {
    "status": ([["status"]], {}),
    "status-json-check": ([["--json", "status", "--check"]], {}),
    "check-after-apply": ([["apply"], ["status", "--check", "--json"]], {}),
    "dry-run": ([["apply", "--dry-run"]], {}),
    "apply-json": ([["apply", "--json"]], {}),
    "apply-one": ([["apply", "eagle3-whitelist"], ["status"]], {}),
    "apply-unknown-name": ([["apply", "no-such-patch"]], {}),
    "apply-bad-name": ([["apply", "--json", "Bad/Name"]], {}),
    "revert": ([["apply"], ["revert"], ["revert", "--json"]], {}),
    "revert-force": ([["revert", "--force"]], {}),
    "target-twice": ([["status", "--target", "/elsewhere"]], {}),
    "python-and-target": ([["--python", "/usr/bin/python3", "status"]], {}),
    "patches-twice": ([["--patches", "/a", "status", "--patches", "/b", "--json"]], {}),
    "bad-lock-timeout": ([["apply", "--json"]], {"VLLM_PATCHER_LOCK_TIMEOUT": "soon"}),
    "missing-patches-folder": ([["--patches", "/no/such/folder", "status"]], {}),
    "ascii-stdout": ([["status"]], {"PYTHONIOENCODING": "ascii"}),  # in a folder named sité
}


def _run(path: str, site: Path, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    full = {**os.environ, **env}
    full.pop("VLLM_PATCHER_PATCHES", None)
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, path, "--target", str(site), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_paths_print_and_exit_the_same(tmp_path: Path, case: str) -> None:
    runs, env = CASES[case]
    site = tmp_path / ("sité" if case == "ascii-stdout" else "site")
    seen: dict[str, list[tuple[int, str, str]]] = {}
    for path in ("fast", "click"):
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(
            sources.fetch_release("0.15.1"), site, ignore=shutil.ignore_patterns(".complete")
        )
        seen[path] = [_run(path, site, args, env) for args in runs]
    assert seen["fast"] == seen["click"]
    # and the case did what its name says: something ran, refusals refused
    codes = [code for code, _, _ in seen["fast"]]
    refused = case in (
        "apply-unknown-name",
        "apply-bad-name",
        "target-twice",
        "python-and-target",
        "patches-twice",
        "bad-lock-timeout",
        "missing-patches-folder",
    )
    assert (codes[-1] not in (0, 1)) == refused, seen["fast"]
