"""cluster status/apply/verify: every node of a Ray cluster, through Ray."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..cluster import nodes as cluster_mod
from ..install import locate as locate_mod
from .app import SubGroup, json_report
from .base import Options, echo


@click.group(cls=SubGroup)
def cluster() -> None:
    """Status, apply or verify on every node of a running Ray cluster, through Ray."""


def _cluster_options(func: Any) -> Any:
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        default=600.0,
        show_default=True,
        help="Seconds to wait for every node's answer.",
    )(func)
    return click.option(
        "--address",
        default="auto",
        show_default=True,
        metavar="ADDR",
        help="Ray cluster address, as for ray.init (HOST:PORT of the head node, or auto).",
    )(func)


def _run_cluster(
    opts: Options, command: str, address: str, timeout: float, strict: bool = False
) -> None:
    if opts.directory:
        raise click.UsageError(
            "cluster works through an interpreter (--python); for a bare site-packages on a node "
            f"set {cluster_mod.SITE_ENV} in that node's environment"
        )
    catalogue = opts.catalogue()
    python = locate_mod.interpreter(opts.python) if opts.python else locate_mod.default_python()
    report = cluster_mod.run(
        command,
        python,
        address,
        timeout=timeout,
        strict=strict,
        user_dirs=catalogue.user_folders(),
    )
    if opts.as_json:
        json_report(report.exit_code, report.to_dict())
        if report.exit_code:
            sys.exit(report.exit_code)
        return
    code = "/".join(sorted({n.code for n in report.nodes if n.code})) or "-"
    echo(
        f"Ray {report.ray_version} cluster at {report.address}: "
        f"{len(report.nodes)} node(s), tool code {code}"
    )
    names = catalogue.names
    echo(
        f"  {'node':<18} {'ip':<15} {'vLLM':<8} {'fingerprint':<40} "
        + "".join(f"{n:<22}" for n in names)
        + "result"
    )
    for n in report.nodes:
        if n.outcome != cluster_mod.ANSWERED:
            result = f"{n.outcome.upper()}: {n.error}"
        elif command == "apply":
            result = f"applied {len(n.changed)} file(s)" if n.changed else "nothing to do"
        elif command == "verify":
            skipped = [t for t, r in n.verify_tiers.items() if r == "skipped"]
            result = "verify OK" if n.verify_ok else "verify FAILED"
            result += f" ({', '.join(skipped)} skipped)" if skipped else ""
        else:
            result = "NOT OK" if n.problems else "ok"
        echo(
            f"  {n.label:<18} {n.ip:<15} {n.vllm_version or '-':<8} {n.fingerprint or '-':<40} "
            + "".join(f"{n.patches.get(p, '-'):<22}" for p in names)
            + result
        )
        if n.location:
            echo(f"      {n.location}")
    for note in report.notes:
        echo(f"note: {note}")
    if report.ok:
        verified = ", verified on every node" if command == "verify" else ""
        echo(
            f"verdict: OK: {len(report.nodes)} node(s), one fingerprint, "
            f"no patch pending or drifted{verified}"
        )
    else:
        bad = sum(bool(n.problems) for n in report.nodes)
        echo(f"verdict: NOT OK ({bad} of {len(report.nodes)} node(s) not ready)")
        for problem in report.problems:
            echo(f"  {problem}")
    if report.exit_code:
        sys.exit(report.exit_code)


@cluster.command("status")
@_cluster_options
@click.pass_obj
def cluster_status(opts: Options, address: str, timeout: float) -> None:
    """Every node's patch states and fingerprint, and one verdict.

    Exit 0 only when every node answers with the same fingerprint and no patch is pending or
    drifted.
    """
    _run_cluster(opts, "status", address, timeout)


@cluster.command("apply")
@_cluster_options
@click.option(
    "--strict", is_flag=True, help="Refuse on a node unless a pinned diff matches exactly."
)
@click.pass_obj
def cluster_apply(opts: Options, address: str, timeout: float, strict: bool) -> None:
    """Apply on every node: all files or none, per node.

    The table says which nodes were applied, which refused and why, and which were lost.
    """
    _run_cluster(opts, "apply", address, timeout, strict=strict)


@cluster.command("verify")
@_cluster_options
@click.pass_obj
def cluster_verify(opts: Options, address: str, timeout: float) -> None:
    """Verify every node, each in its own interpreter.

    Every tier of verify; the import and behaviour tiers run in the node's own Python.
    """
    _run_cluster(opts, "verify", address, timeout)


# --- payoff ----------------------------------------------------------------------------------------
