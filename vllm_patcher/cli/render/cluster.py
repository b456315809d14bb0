"""What cluster status, apply and verify show, as text and as JSON."""

from __future__ import annotations

from ...cluster import nodes as cluster_mod
from .. import outcomes
from ..base import Shown


def cluster(report: cluster_mod.ClusterReport, command: str, names: tuple[str, ...]) -> Shown:
    """Every node's row under the catalogue's patch ``names``, then the verdict."""
    lines: list[str] = []
    tool_code = "/".join(sorted({n.code for n in report.nodes if n.code})) or "-"
    lines.append(
        f"Ray {report.ray_version} cluster at {report.address}: "
        f"{len(report.nodes)} node(s), tool code {tool_code}"
    )
    lines.append(
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
        lines.append(
            f"  {n.label:<18} {n.ip:<15} {n.vllm_version or '-':<8} {n.fingerprint or '-':<40} "
            + "".join(f"{n.patches.get(p, '-'):<22}" for p in names)
            + result
        )
        if n.location:
            lines.append(f"      {n.location}")
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.ok:
        verified = ", verified on every node" if command == "verify" else ""
        lines.append(
            f"verdict: OK: {len(report.nodes)} node(s), one fingerprint, "
            f"no patch pending or drifted{verified}"
        )
    else:
        bad = sum(bool(n.problems) for n in report.nodes)
        lines.append(f"verdict: NOT OK ({bad} of {len(report.nodes)} node(s) not ready)")
        for problem in report.problems:
            lines.append(f"  {problem}")
    lost = any(n.outcome == cluster_mod.LOST for n in report.nodes)
    return Shown(outcomes.cluster(report.ok, lost), report.to_dict(), lines)
