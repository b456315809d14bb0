"""Global options before or after the command, --python VENV_DIR, VIRTUAL_ENV, status --check.

Everything runs through the real command line (``python -m vllm_patcher``). Writes go to tree
copies (``--target``) or to tiny venvs made here whose site-packages hold a copy of the pristine
0.15.1 tree (vllm/ files and the dist-info with its RECORD; status never imports vLLM).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import assert_refused, make_venv, run_cli, states_on, venv_site

SPEC = "vllm/config/speculative.py"
NO_VENV = {"VIRTUAL_ENV": ""}  # an empty VIRTUAL_ENV counts as none active


def placed(position: str, command: list[str], options: list[str]) -> list[str]:
    """``options`` before the command (``before``) or after all of it (``after``)."""
    return [*options, *command] if position == "before" else [*command, *options]


def status_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode in (0, 1), (proc.returncode, proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data


# --- the tiny venvs ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``with_tool``: vLLM and the tool; ``vllm``: vLLM only; ``empty``: neither."""
    base = tmp_path_factory.mktemp("venvs")
    return {
        "with_tool": make_venv(base / "with-tool", vllm=True, tool=True),
        "vllm": make_venv(base / "vllm", vllm=True),
        "empty": make_venv(base / "empty", vllm=False),
    }


def site_of(venv: Path) -> str:
    return str(venv_site(venv / "bin" / "python"))


# --- every command takes the global options on either side ------------------------------------


@pytest.mark.parametrize("position", ["before", "after"])
def test_status_apply_verify_revert_take_the_options_on_either_side(tree_copy, position) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    pristine = (site / SPEC).read_bytes()
    target = ["--target", str(site)]

    data = status_json(run_cli(*placed(position, ["status"], [*target, "--json"])))
    assert data["location"] == str(site) and data["chosen_by"] == "--target"
    assert data["python"] is None

    proc = run_cli(*placed(position, ["apply", "--dry-run"], target))
    assert proc.returncode == 0, proc.stderr
    assert f"+++ b/{SPEC}" in proc.stdout
    assert (site / SPEC).read_bytes() == pristine

    proc = run_cli(*placed(position, ["verify"], [*target, "--json"]))
    assert proc.returncode == 1, proc.stderr  # pending patches: the state tier fails
    assert json.loads(proc.stdout)["location"] == str(site)

    proc = run_cli(*placed(position, ["revert"], [*target, "--json"]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["location"] == str(site)


@pytest.mark.parametrize("position", ["before", "after"])
def test_list_capture_import_port_take_the_options_on_either_side(
    tree_copy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    position: str,
) -> None:
    site = tree_copy("0.15.1")
    mine = tmp_path / "mine"
    mine.mkdir()

    proc = run_cli(*placed(position, ["list"], ["--json"]))
    assert proc.returncode == 0, proc.stderr
    assert "eagle3-whitelist" in {p["name"] for p in json.loads(proc.stdout)["patches"]}

    # capture reached the tree (so --target and --patches were both taken): nothing edited there
    proc = run_cli(
        *placed(position, ["capture", "mine"], ["--target", str(site), "--patches", str(mine)])
    )
    assert_refused(proc, 15, "differs from what its patches produce")

    # usage errors print JSON when --json is given after the command too
    for command, fragment in (
        (["import", "mine"], "import needs --diff FILE"),
        (["port", "eagle3-whitelist"], "port needs --to VERSION"),
        (["port", "nope", "--to", "0.15.1"], "no patch named 'nope'"),
    ):
        proc = run_cli(*placed(position, command, ["--json", "--patches", str(mine)]))
        assert proc.returncode == 2, (command, proc.stderr)
        assert fragment in json.loads(proc.stdout)["error"]
        assert proc.stderr.strip().startswith(f"vllm-patcher: error: {fragment}")


@pytest.mark.parametrize("position", ["before", "after"])
def test_doctor_serve_args_and_cluster_take_the_options_on_either_side(
    tree_copy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    position: str,
) -> None:
    site = tree_copy("0.15.1")
    nowhere = str(tmp_path / "no-model")
    doctor = ["doctor", "--model", nowhere, "--drafter", nowhere]

    proc = run_cli(*placed(position, [*doctor, "--vllm-version", "0.15.1"], ["--json"]))
    assert proc.returncode == 11, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 11
    # without --vllm-version the release comes from --target (the dev venv has no vLLM: 3)
    assert_refused(run_cli(*placed(position, doctor, ["--target", str(site)])), 11, "model")

    serve = ["serve-args", "--model", nowhere, "--drafter", nowhere]
    proc = run_cli(*placed(position, [*serve, "--vllm-version", "0.15.1"], ["--json"]))
    assert proc.returncode == 11, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 11
    # serve-args runs doctor's checks, for the release --target has like doctor
    assert_refused(run_cli(*placed(position, serve, ["--target", str(site)])), 11, "model")

    cluster = ["cluster", "status", "--address", "bogus:1", "--timeout", "5"]
    proc = run_cli(*placed(position, cluster, ["--python", sys.executable, "--json"]))
    assert proc.returncode == 12, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 12
    proc = run_cli(*placed(position, cluster, ["--python", sys.executable]))
    assert_refused(proc, 12, "no Ray")
    proc = run_cli("cluster", "--json", "verify", "--address", "bogus:1")
    assert proc.returncode == 12 and json.loads(proc.stdout)["exit_code"] == 12


def test_every_command_lists_the_global_options_in_its_help() -> None:
    for command in (
        ["status"],
        ["apply"],
        ["verify"],
        ["revert"],
        ["list"],
        ["pin"],
        ["capture"],
        ["import"],
        ["port"],
        ["doctor"],
        ["serve-args"],
        ["cluster"],
        ["cluster", "status"],
        ["cluster", "apply"],
        ["cluster", "verify"],
    ):
        proc = run_cli(*command, "--help")
        assert proc.returncode == 0, (command, proc.stderr)
        for option in ("--python PATH", "--target DIR", "--json", "--patches DIR"):
            assert option in proc.stdout, (command, option)


# --- the same option in both places -------------------------------------------------------------


def test_conflicting_values_are_a_usage_error_and_equal_ones_are_not(tree_copy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    other = tmp_path / "other"
    other.mkdir()
    proc = run_cli("--target", str(site), "status", "--target", str(other))
    assert_refused(proc, 2, "--target given twice with different values")
    proc = run_cli("--python", sys.executable, "status", "--python", "/bin/sh")
    assert_refused(proc, 2, "--python given twice with different values")
    proc = run_cli("--patches", str(tmp_path / "a"), "list", "--patches", str(tmp_path / "b"))
    assert_refused(proc, 2, "--patches given before and after the command")
    proc = run_cli("--python", sys.executable, "cluster", "status", "--python", "/bin/sh")
    assert_refused(proc, 2, "--python given twice")
    # --python with --target stays a usage error wherever each one stands
    proc = run_cli("--python", sys.executable, "status", "--target", str(site))
    assert_refused(proc, 2, "--python and --target are exclusive")
    proc = run_cli("status", "--target", str(site), "--python", sys.executable)
    assert_refused(proc, 2, "--python and --target are exclusive")
    # the same value twice (even spelled with a trailing slash) is fine, and so is --json twice
    proc = run_cli("--json", "--target", str(site), "status", "--target", f"{site}/", "--json")
    assert status_json(proc)["location"] == str(site)
    proc = run_cli("--patches", str(other), "list", "--patches", str(other))
    assert proc.returncode == 0, proc.stderr


def test_an_option_twice_on_one_side_agrees_or_is_refused_in_one_line(venvs, tree_copy) -> None:  # type: ignore[no-untyped-def]
    """Never the last value silently; the venv directory and its bin/python are one value."""
    site = tree_copy("0.15.1")
    venv = venvs["vllm"]
    for args in (
        ["--python", "/a", "--python", "/b", "status"],
        ["status", "--python", "/a", "--python", "/b"],
    ):
        assert_refused(run_cli(*args), 2, "--python given twice with different values (/a, /b)")
    assert_refused(
        run_cli("--target", str(site), "--target", "/elsewhere", "list"),
        2,
        "--target given twice with different values",
    )
    # --python V and --python V/bin/python name the same interpreter, in any positions
    proc = run_cli("--python", str(venv), "status", "--python", str(venv / "bin" / "python"))
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("--python", str(venv), "--python", f"{venv}/", "status", env=NO_VENV)
    assert proc.returncode == 0, proc.stderr
    # the exclusive pair: the same one line whether it comes before or after the command
    before = run_cli("--python", sys.executable, "--target", str(site), "status")
    after = run_cli("status", "--python", sys.executable, "--target", str(site))
    assert_refused(before, 2, "--python and --target are exclusive")
    assert before.stderr == after.stderr


def test_a_usage_error_before_the_command_still_names_it_in_json() -> None:
    for args, command in (
        (["--json", "--bogus", "status"], "status"),
        (["--json", "--bogus", "cluster", "verify"], "cluster verify"),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2
        data = json.loads(proc.stdout)
        assert (data["command"], data["ok"], data["exit_code"]) == (command, False, 2)
        assert "--bogus" in data["error"]


def test_list_checks_a_named_environment_and_marks_its_release(tree_copy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_refused(run_cli("--python", str(tmp_path / "none"), "list"), 3, "does not exist")
    site = tree_copy("0.15.1")
    proc = run_cli("list", "--target", str(site))
    assert proc.returncode == 0, proc.stderr
    assert "what apply does on vLLM 0.15.1*:" in proc.stdout.splitlines(), proc.stdout
    assert "  eagle3-granite          pinned-diff" in proc.stdout.splitlines(), proc.stdout
    data = json.loads(run_cli("--json", "list", "--target", str(site)).stdout)
    assert data["installed"] == {"vllm_version": "0.15.1", "site_packages": str(site)}
    assert "installed" not in json.loads(run_cli("--json", "list").stdout)


# --- which vLLM: --python VENV_DIR, this interpreter, VIRTUAL_ENV --------------------------------


def test_python_takes_a_venv_directory(venvs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    venv = venvs["vllm"]
    for python in (str(venv), f"{venv}/", str(venv / "bin" / "python")):
        data = status_json(run_cli("status", "--json", "--python", python, env=NO_VENV))
        assert data["location"] == site_of(venv)
        assert data["chosen_by"] == "--python"
        assert data["python"] == str(venv / "bin" / "python")
    proc = run_cli("--python", str(venv), "status", env=NO_VENV)
    assert proc.returncode == 0, proc.stderr
    assert f"target: {venv / 'bin' / 'python'} (--python)" in proc.stdout.splitlines()[1]
    assert_refused(
        run_cli("--python", str(tmp_path), "status"),
        3,
        f"{tmp_path} is a directory without bin/python",
    )
    assert_refused(run_cli("--python", str(venvs["empty"]), "status"), 3, "no vLLM installed")
    # not Python at all: still one short line, no script text
    proc = run_cli("status", "--python", "/bin/ls")
    assert_refused(proc, 3, "did not answer like a Python interpreter")
    assert len(proc.stderr.strip()) < 200 and "import" not in proc.stderr


def test_virtual_env_is_used_when_this_interpreter_has_no_vllm(venvs) -> None:  # type: ignore[no-untyped-def]
    venv = venvs["vllm"]
    env = {"VIRTUAL_ENV": str(venv)}
    data = status_json(run_cli("status", "--json", env=env))  # the dev venv has no vLLM
    assert data["location"] == site_of(venv)
    assert data["chosen_by"] == "VIRTUAL_ENV"
    assert data["python"] == str(venv / "bin" / "python")
    proc = run_cli("status", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == f"target: {venv / 'bin' / 'python'} (from VIRTUAL_ENV)"
    # an active venv without vLLM: one line that says how to point at the right one
    proc = run_cli("status", env={"VIRTUAL_ENV": str(venvs["empty"])})
    assert_refused(proc, 3, "no vLLM installed", "VIRTUAL_ENV", "--python /path/to/venv")
    assert_refused(run_cli("status", env=NO_VENV), 3, "no vLLM installed", "--python")


def test_this_interpreter_with_vllm_and_python_and_target_beat_virtual_env(
    venvs, tree_copy
) -> None:  # type: ignore[no-untyped-def]
    here, active = venvs["with_tool"], venvs["vllm"]
    env = {"VIRTUAL_ENV": str(active)}
    # the tool running inside a vLLM venv (make pre-deploy) works on that venv
    data = status_json(run_cli("--json", "status", python=str(here / "bin" / "python"), env=env))
    assert data["location"] == site_of(here)
    assert data["chosen_by"] == "this interpreter"
    proc = run_cli("status", python=str(here / "bin" / "python"), env=env)
    assert proc.stdout.splitlines()[1] == f"target: {here / 'bin' / 'python'} (this interpreter)"
    # --python and --target beat VIRTUAL_ENV
    data = status_json(run_cli("status", "--json", "--python", str(here), env=env))
    assert data["location"] == site_of(here) and data["chosen_by"] == "--python"
    site = tree_copy("0.15.1")
    data = status_json(run_cli("status", "--json", "--target", str(site), env=env))
    assert data["location"] == str(site) and data["chosen_by"] == "--target"


# --- status --check: the CI gate -------------------------------------------------------------------


def test_status_check_is_the_ci_gate(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ["--target", str(site)]
    proc = run_cli("status", "--check", *target)
    assert proc.returncode == 1, proc.stderr
    assert "pending" in proc.stdout  # the normal output is still printed
    proc = run_cli("--json", "status", "--check", *target)
    assert proc.returncode == 1
    assert [p["state"] for p in json.loads(proc.stdout)["patches"]] == states_on(
        "0.15.1", "pending"
    )
    assert run_cli("status", *target).returncode == 0  # without --check, status is a report

    run_cli("apply", *target, check=True)
    proc = run_cli("status", "--check", *target)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    (site / SPEC).write_text((site / SPEC).read_text() + "# a local edit after apply\n")
    proc = run_cli("status", "--check", "--json", *target)
    assert proc.returncode == 1
    states = {p["name"]: p["state"] for p in json.loads(proc.stdout)["patches"]}
    assert states["eagle3-whitelist"] == "drifted", states


def test_revert_says_what_it_leaves_in_site_packages_and_removing_it_is_safe(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    assert run_cli("--target", str(site), "apply").returncode == 0
    proc = run_cli("--target", str(site), "revert")
    assert proc.returncode == 0, proc.stderr
    state = site / ".vllm-patcher"
    assert f"left in place: {state} (only the lock file now)" in proc.stdout
    assert sorted(p.name for p in state.iterdir()) == ["lock"]
    # saved copies from an earlier revert --force are named, so the line never says "only the lock"
    (state / "saved" / "20261130T000000").mkdir(parents=True)
    assert run_cli("--target", str(site), "apply").returncode == 0
    proc = run_cli("--target", str(site), "revert")
    assert "in saved/ the copies of your edits" in proc.stdout, proc.stdout
    assert "only the lock file" not in proc.stdout
    # an empty saved/ (the copies moved out) is not named
    (state / "saved" / "20261130T000000").rmdir()
    assert run_cli("--target", str(site), "apply").returncode == 0
    assert "(only the lock file now)" in run_cli("--target", str(site), "revert").stdout
    shutil.rmtree(state)  # what the line says to do
    data = status_json(run_cli("--json", "--target", str(site), "status"))
    assert {p["state"] for p in data["patches"]} <= {"pending", "not-applicable", "upstream"}, data


def test_one_parser_reads_every_list_of_whole_numbers() -> None:
    from vllm_patcher.cli import options
    from vllm_patcher.errors import BadSetting

    assert options.integers("--k", "0, 1,2,,3", "0,1,2,3") == [0, 1, 2, 3]
    for bad, said in (("1,x", "give integers like 1,4,16"), (",", "at least one value")):
        with pytest.raises(BadSetting, match=said):
            options.integers("--concurrency", bad, "1,4,16")


BENCH = ("payoff", "bench", "http://127.0.0.1:9", "--baseline-url", "http://127.0.0.1:10")
SWEEP = ("payoff", "sweep", "--url", "0=http://127.0.0.1:9", "--url", "1=http://127.0.0.1:10")


@pytest.mark.parametrize("command", [BENCH, SWEEP])
def test_bench_and_sweep_refuse_an_empty_concurrency_list_alike(command: tuple[str, ...]) -> None:
    proc = run_cli(*command, "--concurrency", ",")
    assert_refused(proc, 2, "--concurrency: give at least one value, like 1,4,16")


@pytest.mark.parametrize(
    ("command", "given", "said"),
    [
        (BENCH, ("--concurrency", "1,0"), "--concurrency takes positive integers, e.g. 1,4,16"),
        (SWEEP, ("--concurrency", "-4"), "--concurrency takes positive integers, e.g. 1,4,16"),
        (BENCH, ("--repeat", "0"), "--repeat 0: give 1 or more runs per concurrency"),
        (BENCH, ("--", "--num-p=8"), "--num-p after --: payoff bench sets it itself"),
        (BENCH, ("--", "--max_concurrency", "2"), "--max_concurrency after --: payoff bench sets"),
        (
            SWEEP,
            ("--client-args", "--num-p=8"),
            "--client-args --num-p: payoff sweep sets it itself",
        ),
        (SWEEP, ("--repeat", "-1"), "--repeat -1: give 1 or more runs per cell"),
        (SWEEP, ("--ready-timeout", "0"), "--ready-timeout takes a finite number of seconds"),
        (("rehearse",), ("--ready-timeout", "nan", "--", "/m"), "--ready-timeout takes a finite"),
        (("rehearse",), ("--ready-timeout", "-5", "--", "/m"), "--ready-timeout takes a finite"),
    ],
)
def test_a_shared_option_s_rule_refuses_in_one_line_for_every_command_that_takes_it(
    command: tuple[str, ...], given: tuple[str, ...], said: str
) -> None:
    """--concurrency, --repeat and --ready-timeout are checked once, where they are declared
    (cli/options.py), before any interpreter is looked for; so are the client arguments that
    either command sets itself (load/vllm_bench.py LOAD_SETS: payoff bench let them override its
    own, where the sweep refused them)."""
    assert_refused(run_cli(*command, *given), 2, said)
    proc = run_cli("--json", *command, *given)
    assert json.loads(proc.stdout)["exit_code"] == 2 and said in json.loads(proc.stdout)["error"]


@pytest.mark.parametrize("columns", ["100", "80"])
def test_list_fits_the_terminal_and_shows_one_release_when_asked(columns: str) -> None:
    proc = run_cli("list", env={"COLUMNS": columns})
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= int(columns)
    assert "  eagle3-whitelist      0.11.0-0.17.1 pinned-diff;" in proc.stdout
    one = run_cli("list", "--vllm-version", "0.17.1", env={"COLUMNS": columns})
    assert "what apply does on vLLM 0.17.1:" in one.stdout.splitlines()
    assert "  eagle3-whitelist        pinned-diff" in one.stdout.splitlines()
    assert_refused(run_cli("list", "--vllm-version", "0.17.1", "--all"), 2, "not both")


def test_global_options_are_declared_once_and_cluster_refuses_a_target_as_a_usage_error(
    tmp_path: Path,
) -> None:
    """--python, --target, --json and --patches read the same before and after a command (one
    declaration), and cluster's refusal of a bare site-packages is the usage exit every other
    refusal of an option gives, before Ray is looked for."""
    before = run_cli("--help").stdout
    after = run_cli("status", "--help").stdout
    for flag in ("--python PATH", "--target DIR", "--json", "--patches DIR"):
        assert flag in before and flag in after, flag
    assert_refused(
        run_cli("--target", str(tmp_path), "cluster", "status"), 2, "cluster works through"
    )
    assert_refused(run_cli("cluster", "status", "--target", str(tmp_path)), 2, "--python")
