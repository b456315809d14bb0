"""Ray driver for ``vllm-patcher cluster``, run as a script in the target environment's interpreter.

Standalone on purpose (standard library and Ray only), like ``probe.py`` beside it: it runs wherever Ray
is installed, whether or not vllm-patcher is. Reads a JSON request from argv[1]; connects to the
cluster; runs one task pinned to each alive node (``NodeAffinitySchedulingStrategy``, soft=False),
which calls ``vllm_patcher.cluster.nodes.run_on_node`` from the code shipped as runtime_env
``py_modules``; prints one JSON line as the last line of stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from typing import Any

# Ray hands the driver's script directory to every worker's sys.path; this one is the tool's
# scripts folder, whose files must not become top-level imports on the nodes.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

POLL_SECONDS = 0.5


def emit(data: dict[str, Any]) -> None:
    sys.stdout.write("\n" + json.dumps(data) + "\n")
    sys.stdout.flush()


def first_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:limit]


def resolve(address: str) -> tuple[str, str | None]:
    """The cluster's HOST:PORT and why nothing answers there (None when something does).

    Checked first because ray.init keeps retrying an address where nothing listens for minutes.
    """
    if address.startswith("ray://"):
        return address, None
    try:
        from ray._private import services

        resolved = str(services.canonicalize_bootstrap_address_or_die(address))
    except ConnectionError as exc:
        return address, first_line(exc)
    except Exception:  # noqa: BLE001 - a private helper; ray.init has the last word
        return address, None
    host, _, port = resolved.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        return resolved, f"{resolved} does not answer ({getattr(exc, 'strerror', None) or exc})"
    return resolved, None


def node_task(command: str, strict: bool) -> dict[str, Any]:
    """Runs on the node. Imported there, so it comes from py_modules when shipped."""
    from vllm_patcher.cluster.nodes import run_on_node

    result: dict[str, Any] = run_on_node(command, strict)
    return result


def alive_nodes(ray: Any) -> dict[str, dict[str, Any]]:
    return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}


def run_round(
    ray: Any, nodes: dict[str, dict[str, Any]], request: dict[str, Any], code: str
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """One task per node; returns rows by node id and the ids whose shipped code failed to set up."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(node_task)
    unschedulable = getattr(ray.exceptions, "TaskUnschedulableError", ())
    pending: dict[Any, str] = {}
    for node_id in nodes:
        ref = task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(request["command"], bool(request.get("strict")))
        pending[ref] = node_id
    rows: dict[str, dict[str, Any]] = {}
    setup_failed: list[str] = []
    deadline = time.monotonic() + float(request["timeout"])
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
        for ref in done:
            node_id = pending.pop(ref)
            row: dict[str, Any] = {"code": code}
            try:
                row.update(outcome="answered", answer=ray.get(ref))
            except ray.exceptions.RuntimeEnvSetupError as exc:
                setup_failed.append(node_id)
                row.update(
                    outcome="failed", error=f"shipped tool code not set up: {first_line(exc)}"
                )
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                error = f"the task raised {type(cause).__name__}: {first_line(cause)}"
                if isinstance(cause, ImportError) and code == "installed":
                    error += " (install this vllm-patcher on the node, or let Ray ship it)"
                row.update(outcome="failed", error=error)
            except ray.exceptions.RayError as exc:
                # Ray's first sentence says what happened; the rest is generic advice
                what = f"({type(exc).__name__}): {first_line(exc).split('. ')[0]}"
                if isinstance(exc, unschedulable):  # gone between listing and scheduling
                    row.update(outcome="lost", error=f"gone before its task started {what}")
                else:
                    row.update(outcome="lost", error=f"died mid-run {what}")
            rows[node_id] = row
        if not pending or done:
            continue
        # A dead node's task may never report back (its worker can outlive the raylet).
        alive = alive_nodes(ray)
        expired = time.monotonic() > deadline
        for ref, node_id in list(pending.items()):
            if node_id in alive and not expired:
                continue
            pending.pop(ref)
            reason = (
                "died mid-run: Ray marked the node dead"
                if node_id not in alive
                else f"no answer within {float(request['timeout']):.0f} s"
            )
            rows[node_id] = {"code": code, "outcome": "lost", "error": reason}
            with contextlib.suppress(Exception):  # the node may already be gone
                ray.cancel(ref, force=True)
    return rows, setup_failed


def connect(ray: Any, address: str, py_modules: list[str] | None) -> None:
    runtime_env = {"py_modules": py_modules} if py_modules else None
    ray.init(
        address=address,
        runtime_env=runtime_env,
        log_to_driver=False,
        logging_level="WARNING",
    )


def main() -> None:
    request = json.loads(sys.argv[1])
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        import ray
    except ImportError as exc:
        emit({"error": {"kind": "no-ray", "message": first_line(exc)}})
        return
    timings["import_ray"] = round(time.perf_counter() - t0, 3)
    address, problem = resolve(str(request["address"]))
    if problem is not None:
        emit({"error": {"kind": "no-cluster", "message": problem}})
        return
    notes: list[str] = []
    code = "shipped"
    t1 = time.perf_counter()
    try:
        connect(ray, address, request.get("py_modules"))
    except ConnectionError as exc:
        emit({"error": {"kind": "no-cluster", "message": first_line(exc)}})
        return
    except Exception as exc:  # noqa: BLE001 - the upload of py_modules failed: use installed code
        notes.append(f"could not ship vllm_patcher ({first_line(exc)}); used each node's own copy")
        code = "installed"
        try:
            ray.shutdown()
            connect(ray, address, None)
        except Exception as again:  # noqa: BLE001
            emit({"error": {"kind": "no-cluster", "message": first_line(again)}})
            return
    timings["connect"] = round(time.perf_counter() - t1, 3)
    nodes = alive_nodes(ray)
    if not nodes:
        emit({"error": {"kind": "no-nodes", "message": "no alive node"}})
        return
    dead = [n for n in ray.nodes() if not n.get("Alive")]
    if dead:
        notes.append(f"{len(dead)} node(s) Ray lists as dead were not asked")
    t2 = time.perf_counter()
    rows, setup_failed = run_round(ray, nodes, request, code)
    timings["tasks"] = round(time.perf_counter() - t2, 3)
    if setup_failed and code == "shipped":
        # A job's py_modules cannot be dropped per task: a second job without them.
        notes.append(
            f"shipped code could not be set up on {len(setup_failed)} node(s); "
            "those ran the vllm_patcher installed there"
        )
        try:
            ray.shutdown()
            connect(ray, address, None)
        except Exception as exc:  # noqa: BLE001 - those nodes keep their setup failure
            notes.append(f"could not reconnect without py_modules: {first_line(exc)}")
        else:
            retry, _ = run_round(ray, {n: nodes[n] for n in setup_failed}, request, "installed")
            rows.update(retry)
    out_nodes = []
    for node_id, info in nodes.items():
        row = rows.get(node_id, {"outcome": "lost", "error": "no answer"})
        out_nodes.append(
            {
                "node_id": node_id,
                "host": info.get("NodeManagerHostname", "?"),
                "ip": info.get("NodeManagerAddress", ""),
                **row,
            }
        )
    out_nodes.sort(key=lambda n: (str(n["host"]), str(n["ip"]), str(n["node_id"])))
    emit(
        {
            "address": address,
            "ray_version": ray.__version__,
            "nodes": out_nodes,
            "notes": notes,
            "timings": timings,
        }
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
