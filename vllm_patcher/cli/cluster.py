"""cluster status/apply/verify: every node of a Ray cluster, through Ray."""

from __future__ import annotations

from typing import Any

import click

from ..cluster import nodes as cluster_mod
from .app import SubGroup, pass_app
from .base import Application
from .render import cluster as render


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
    app: Application, command: str, address: str, timeout: float, strict: bool = False
) -> None:
    opts = app.options
    python = opts.interpreter(
        "cluster works through an interpreter (--python); for a bare site-packages on a node "
        f"set {cluster_mod.SITE_ENV} in that node's environment"
    )
    catalogue = opts.catalogue()
    report = cluster_mod.run(
        command,
        python,
        address,
        timeout=timeout,
        strict=strict,
        user_dirs=catalogue.user_folders(),
    )
    app.show(render.cluster(report, command, catalogue.names))


@cluster.command("status")
@_cluster_options
@pass_app
def cluster_status(app: Application, address: str, timeout: float) -> None:
    """Every node's patch states and fingerprint, and one verdict.

    Exit 0 only when every node answers with the same fingerprint and no patch is pending or
    drifted.
    """
    _run_cluster(app, "status", address, timeout)


@cluster.command("apply")
@_cluster_options
@click.option(
    "--strict", is_flag=True, help="Refuse on a node unless a pinned diff matches exactly."
)
@pass_app
def cluster_apply(app: Application, address: str, timeout: float, strict: bool) -> None:
    """Apply on every node: all files or none, per node.

    The table says which nodes were applied, which refused and why, and which were lost.
    """
    _run_cluster(app, "apply", address, timeout, strict=strict)


@cluster.command("verify")
@_cluster_options
@pass_app
def cluster_verify(app: Application, address: str, timeout: float) -> None:
    """Verify every node, each in its own interpreter.

    Every tier of verify; the import and behaviour tiers run in the node's own Python.
    """
    _run_cluster(app, "verify", address, timeout)
