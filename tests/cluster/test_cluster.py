"""`cluster status|apply|verify` on a real local Ray cluster: a head and worker nodes on this machine.

The dev venv has no Ray, so everything Ray runs in the vLLM venv's interpreter: a helper script
there starts the cluster (``ray.cluster_utils.Cluster``) with each node's own ``VLLM_PATCHER_SITE``
(its own copy of the pristine 0.15.1 tree) and the CLI reaches it with ``--python``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vllm_patcher.cluster import nodes as cluster
from vllm_patcher.cluster.nodes import SITE_ENV

from ..conftest import (
    REPO,
    run_cli,
    scratch_tree,
    states_on,
    test_venv_python,
    touched_match_record,
)

VERSION = "0.15.1"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
MARKER = "VLLM_PATCHER_TEST_CLUSTER"

# Runs in the vLLM venv. Line protocol on stdin: "add SITE" -> {"node_id"}, "kill NODE_ID" ->
# {"killed"}; end of input shuts the cluster down. The first stdout line is the cluster.
HELPER = r"""
import json, sys
from ray.cluster_utils import Cluster

cfg = json.loads(sys.argv[1])
small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
def env(site):
    return {"env_vars": {cfg["site_env"]: site}}
head = dict(small, include_dashboard=False, **env(cfg["sites"][0]),
            _system_config={"health_check_period_ms": 1000, "health_check_failure_threshold": 3})
c = Cluster(initialize_head=True, head_node_args=head)
nodes = {c.head_node.node_id: c.head_node}
for site in cfg["sites"][1:]:
    n = c.add_node(**small, **env(site))
    nodes[n.node_id] = n
c.wait_for_nodes()
def reply(data):
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()
reply({"address": c.address, "nodes": [[i, s] for i, s in zip(nodes, cfg["sites"])]})
for line in sys.stdin:
    verb, _, arg = line.strip().partition(" ")
    if verb == "add":
        n = c.add_node(**small, **env(arg))
        c.wait_for_nodes()
        nodes[n.node_id] = n
        reply({"node_id": n.node_id})
    elif verb == "kill":
        c.remove_node(nodes.pop(arg), allow_graceful=False)
        # Ray lists a killed node as alive until its health checks fail; the next test must not
        # see it, so the reply waits until the cluster has dropped it.
        c.wait_for_nodes(timeout=120)
        reply({"killed": arg})
c.shutdown()
"""


@dataclass
class LocalCluster:
    address: str
    python: Path
    sites: dict[str, Path]  # node id -> the site-packages that node inspects
    helper: subprocess.Popen[str] = field(repr=False)

    def request(self, line: str, timeout: float = 60) -> dict[str, Any]:
        assert self.helper.stdin is not None
        self.helper.stdin.write(line + "\n")
        self.helper.stdin.flush()
        return read_reply(self.helper, timeout)

    def cli(
        self, command: str, *args: str, address: str | None = None, patches: Path | None = None
    ) -> tuple[int, Any]:
        proc = run_cli(
            "--python",
            str(self.python),
            *(["--patches", str(patches)] if patches else []),
            "cluster",
            command,
            "--address",
            address or self.address,
            "--json",
            *args,
        )
        assert proc.stdout, proc.stderr
        return proc.returncode, json.loads(proc.stdout)


def read_reply(helper: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    assert helper.stdout is not None
    ready, _, _ = select.select([helper.stdout], [], [], timeout)
    line = helper.stdout.readline() if ready else ""
    if not line:
        raise AssertionError(f"cluster helper gave no answer (exit {helper.poll()})")
    data: dict[str, Any] = json.loads(line)
    return data


def kill_marked(token: str) -> None:
    """SIGKILL every process started for this cluster: Ray workers leave the helper's process
    group, and one whose raylet was killed keeps running, but all inherit the marker."""
    needle = f"{MARKER}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def reset(site: Path) -> None:
    """Bring a node's tree back to the pristine release (same path: the node's env points at it)."""
    shutil.rmtree(site)
    scratch_tree(VERSION, site)


def apply_locally(site: Path) -> None:
    from vllm_patcher.catalogue.folders import load_catalogue
    from vllm_patcher.install import locate as target
    from vllm_patcher.patching import txn

    catalogue = load_catalogue()
    txn.apply(target.locate_in_directory(str(site), catalogue), catalogue)


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    python = test_venv_python()
    if not python.exists():
        pytest.fail(f"no vLLM venv at {python}; `make test` creates it (make test-venv)")
    root = tmp_path_factory.mktemp("cluster")
    sites = [root / f"node{i}" for i in range(2)]
    for site in sites:
        site.mkdir()
        reset(site)
    token = uuid.uuid4().hex
    config = {"site_env": SITE_ENV, "sites": [str(s) for s in sites]}
    helper = subprocess.Popen(
        [str(python), "-c", HELPER, json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=root,
        env={**os.environ, MARKER: token},
        start_new_session=True,
    )
    try:
        info = read_reply(helper, timeout=90)
        yield LocalCluster(
            address=info["address"],
            python=python,
            sites={node_id: Path(site) for node_id, site in info["nodes"]},
            helper=helper,
        )
    finally:
        with contextlib.suppress(OSError):
            assert helper.stdin is not None
            helper.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.wait(timeout=30)
        kill_marked(token)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(helper.pid, signal.SIGKILL)
        helper.wait(timeout=10)


@pytest.fixture
def nodes(local_cluster: LocalCluster) -> dict[str, Path]:
    """Every node's tree pristine at the start of a test."""
    for site in local_cluster.sites.values():
        reset(site)
    return local_cluster.sites


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node_id"]: n for n in report["nodes"]}


def named(report: dict[str, Any]) -> set[str]:
    return {n["node_id"] for n in report["nodes"] if n["problems"]}


def test_status_is_ok_when_every_node_is_patched(
    local_cluster: LocalCluster, nodes: dict[str, Path]
) -> None:
    for site in nodes.values():
        apply_locally(site)
    code, report = local_cluster.cli("status")
    assert code == 0, report["problems"]
    assert report["ok"] and report["problems"] == []
    by_node = rows(report)
    assert set(by_node) == set(nodes)
    for node_id, row in by_node.items():
        # each task ran on its own node: it read that node's VLLM_PATCHER_SITE
        assert row["location"] == str(nodes[node_id])
        assert row["vllm_version"] == VERSION
        assert set(row["patches"].values()) == set(states_on("0.15.1", "applied"))
        # the tool code came through py_modules, not from the venv's installed vllm_patcher
        assert row["code"] == "shipped"
        assert "runtime_resources" in row["tool"] and "site-packages" not in row["tool"]
    assert len(report["fingerprints"]) == 1


def test_status_names_the_node_left_pristine(
    local_cluster: LocalCluster, nodes: dict[str, Path]
) -> None:
    patched, pristine = list(nodes)
    apply_locally(nodes[patched])
    code, report = local_cluster.cli("status")
    assert code == 1
    assert named(report) == {pristine}
    row = rows(report)[pristine]
    assert set(row["patches"].values()) == set(states_on("0.15.1", "pending"))
    assert any("pending" in p for p in row["problems"])
    assert len(report["fingerprints"]) == 2
    assert any(p.startswith("fingerprints differ") for p in report["problems"])

    where = ["--python", str(local_cluster.python)]
    text = run_cli(*where, "cluster", "status", "--address", local_cluster.address)
    assert text.returncode == 1
    verdict = text.stdout[text.stdout.index("verdict:") :]
    assert "NOT OK (1 of 2 node(s) not ready)" in verdict
    assert f"/{pristine[:8]}: " in verdict and f"/{patched[:8]}: " not in verdict


def test_status_names_a_hot_fixed_node_and_why(
    local_cluster: LocalCluster, nodes: dict[str, Path]
) -> None:
    clean, hot_fixed = list(nodes)
    for site in nodes.values():
        apply_locally(site)
    path = nodes[hot_fixed] / DEEPSEEK
    data = path.read_bytes()
    assert data.count(b"Apache") >= 1
    path.write_bytes(data.replace(b"Apache", b"apache", 1))  # one byte

    code, report = local_cluster.cli("status")
    assert code == 1
    assert named(report) == {hot_fixed}
    row = rows(report)[hot_fixed]
    assert row["patches"]["supports-eagle3"] == "drifted"
    assert any(f"{DEEPSEEK} changed after vllm-patcher applied it" in p for p in row["problems"])
    assert rows(report)[clean]["fingerprint"] != row["fingerprint"]


def test_apply_brings_a_pristine_node_to_applied_with_equal_fingerprints(
    local_cluster: LocalCluster, nodes: dict[str, Path]
) -> None:
    patched, pristine = list(nodes)
    apply_locally(nodes[patched])
    code, before = local_cluster.cli("verify")
    assert code == 1 and named(before) == {pristine}
    assert rows(before)[pristine]["verify_tiers"]["state"] == "failed"

    code, report = local_cluster.cli("apply")
    assert code == 0, report["problems"]
    by_node = rows(report)
    assert by_node[patched]["changed"] == []
    assert len(by_node[pristine]["changed"]) == len(touched_match_record(nodes[pristine]))
    assert not any(touched_match_record(nodes[pristine]).values())

    code, status = local_cluster.cli("status")
    assert code == 0, status["problems"]
    assert len(status["fingerprints"]) == 1
    code, verified = local_cluster.cli("verify")
    assert code == 0, verified["problems"]
    # a bare VLLM_PATCHER_SITE has no interpreter of its own: like --target, no import tier
    for row in verified["nodes"]:
        assert row["verify_tiers"] == {
            "compile": "passed",
            "state": "passed",
            "import": "skipped",
            "behaviour": "skipped",
        }


def test_apply_is_all_or_nothing_per_node_and_says_which_node_refused(
    local_cluster: LocalCluster, nodes: dict[str, Path]
) -> None:
    good, edited = list(nodes)
    path = nodes[edited] / DEEPSEEK
    path.write_bytes(path.read_bytes().replace(b"Apache", b"apache", 1))
    before = {rel: (nodes[edited] / rel).read_bytes() for rel in touched_match_record(nodes[good])}

    code, report = local_cluster.cli("apply")
    assert code == 1
    by_node = rows(report)
    assert by_node[good]["outcome"] == "answered"
    assert set(by_node[good]["patches"].values()) == set(states_on("0.15.1", "applied"))
    assert by_node[edited]["outcome"] == "failed"
    assert by_node[edited]["error_exit_code"] == 5
    assert f"{DEEPSEEK} differs from what pip installed" in by_node[edited]["error"]
    assert named(report) == {edited}
    assert {rel: (nodes[edited] / rel).read_bytes() for rel in before} == before


def test_a_node_that_dies_mid_run_is_named_and_the_others_still_report(
    local_cluster: LocalCluster, nodes: dict[str, Path], tmp_path: Path
) -> None:
    for site in nodes.values():
        apply_locally(site)
    doomed_site = tmp_path / "doomed"
    doomed_site.mkdir()
    reset(doomed_site)
    fifo = doomed_site / DEEPSEEK
    fifo.unlink()
    os.mkfifo(fifo)  # reading it blocks: the node's task is mid-run until we kill the node
    doomed = local_cluster.request(f"add {doomed_site}")["node_id"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_patcher", "--python", str(local_cluster.python), "--json"]
        + ["cluster", "status", "--address", local_cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    writer = None
    try:
        deadline = time.monotonic() + 60
        while writer is None:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # succeeds once a reader waits
            except OSError as exc:
                assert exc.errno == errno.ENXIO
                assert time.monotonic() < deadline, "the doomed node's task never started"
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.1)
        local_cluster.request(f"kill {doomed}", timeout=150)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        if writer is not None:
            os.close(writer)
    assert proc.returncode == 12, err
    assert err.strip().splitlines() == []  # the report, not a traceback
    report = json.loads(out)
    by_node = rows(report)
    assert by_node[doomed]["outcome"] == "lost"
    assert "died mid-run" in by_node[doomed]["error"], by_node[doomed]["error"]
    assert named(report) == {doomed}
    for node_id in nodes:
        assert by_node[node_id]["outcome"] == "answered"
        assert by_node[node_id]["location"] == str(nodes[node_id])


def test_no_cluster_at_the_address_is_one_line_and_exit_12(local_cluster: LocalCluster) -> None:
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    started = time.monotonic()
    proc = run_cli(
        "--python", str(local_cluster.python), "cluster", "status", "--address", f"127.0.0.1:{port}"
    )
    assert proc.returncode == 12
    assert proc.stderr.startswith(f"vllm-patcher: error: no Ray cluster at 127.0.0.1:{port}")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 30


def test_no_ray_in_the_target_environment_is_one_line_and_exit_12() -> None:
    # the dev venv's own interpreter: vllm-patcher, but neither Ray nor vLLM
    proc = run_cli("--python", sys.executable, "cluster", "status")
    assert proc.returncode == 12
    assert proc.stderr.startswith(
        f"vllm-patcher: error: no Ray in the target environment ({sys.executable})"
    )
    assert len(proc.stderr.strip().splitlines()) == 1


def test_node_task_reads_the_site_from_its_environment(
    tree_copy: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = tree_copy(VERSION)
    monkeypatch.setenv(SITE_ENV, str(site))
    answer = cluster.run_on_node("status")
    assert answer["status"]["location"] == str(site)
    assert "error" not in answer
    monkeypatch.setenv(SITE_ENV, str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    answer = cluster.run_on_node("apply")
    assert answer["error"]["exit_code"] == 3
    assert "status" not in answer


def test_a_user_patch_folder_ships_with_the_tool_and_is_applied_on_every_node(
    local_cluster: LocalCluster, nodes: dict[str, Path], tmp_path: Path
) -> None:
    """A patch of the user's own, stacked on the built-ins, goes to every node with the tool's
    code; each node applies, verifies and fingerprints it like a built-in."""
    local = tmp_path / "local"
    local.mkdir()
    reset(local)
    mine = tmp_path / "mine"
    mine.mkdir()
    run_cli("--target", str(local), "apply", check=True)
    spec = local / "vllm/config/speculative.py"
    spec.write_text(spec.read_text() + "# site note: EAGLE-3 audited\n")
    run_cli("--target", str(local), "--patches", str(mine), "capture", "site-note", check=True)
    assert (mine / "site-note" / f"vllm-{VERSION}" / "patch.diff").is_file()

    code, report = local_cluster.cli("apply", patches=mine)
    assert code == 0, report["problems"]
    for row in report["nodes"]:
        assert row["patches"]["site-note"] == "applied", row
        assert set(row["patches"].values()) <= {"applied", "not-applicable", "upstream"}
    assert len(report["fingerprints"]) == 1
    # the same fingerprint as the machine where the patch was captured
    local_fp = json.loads(run_cli("--target", str(local), "--json", "status").stdout)["fingerprint"]
    assert local_fp in report["fingerprints"]
    for site in nodes.values():
        assert (
            (site / "vllm/config/speculative.py")
            .read_text()
            .endswith("# site note: EAGLE-3 audited\n")
        )
    # without the folder, the nodes still know it from their record
    code, status = local_cluster.cli("status")
    assert code == 0, status["problems"]
    assert all(r["patches"]["site-note"] == "applied" for r in status["nodes"])
    code, verified = local_cluster.cli("verify", patches=mine)
    assert code == 0, verified["problems"]
