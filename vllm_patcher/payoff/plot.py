"""``--plot FILE.png``: the acceptance curve and the expected speedup per k (matplotlib, the
optional ``plot`` extra, imported only here)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadSetting

if TYPE_CHECKING:
    from .analysis import Analysis
    from .bench import BenchResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def check_available(path: Path) -> None:
    """Before anything is measured: a plot that cannot be drawn is a usage error."""
    if path.suffix.lower() != ".png":
        raise BadSetting(f"--plot {path}: give a .png file name")
    import os
    import sys

    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise BadSetting(f"--plot {path}: not a file that can be written (check the folder)")
    if _pyplot() is None:
        raise BadSetting(
            f"--plot needs matplotlib: {sys.executable} -m pip install matplotlib (the tool's "
            "environment; from a checkout, pip install '.[plot]' does the same)"
        )


def draw(a: Analysis, path: Path) -> None:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    positions = list(range(1, a.k + 1))
    left.plot(positions, [p * 100 for p in a.prefix], "o-", label="draft accepted up to here")
    left.plot(
        positions,
        [(c or 0) * 100 for c in a.conditional],
        "s--",
        label="accepted, given the one before",
    )
    left.set_xlabel("draft position")
    left.set_ylabel("% of drafts")
    left.set_ylim(0, 105)
    left.set_xticks(positions)
    left.set_title(f"acceptance (mean length {a.mean_acceptance_length or 0:.2f}, k = {a.k})")
    left.legend(loc="upper right")
    if a.expected_speedup:
        ks = list(a.expected_speedup)
        right.plot(ks, list(a.expected_speedup.values()), "o-", label="expected (fitted)")
        if a.speedup is not None:
            right.plot([a.k], [a.speedup], "r*", markersize=14, label="measured")
        right.set_xticks(ks)
    elif a.speedup is not None:
        right.plot([a.k], [a.speedup], "r*", markersize=14, label="measured (no cost fitted)")
        right.set_xticks([a.k])
    else:
        right.text(
            0.5, 0.5, "no baseline:\nspeedup not measured", ha="center", va="center",
            transform=right.transAxes,
        )  # fmt: skip
        right.set_ylim(0, 2)
    right.axhline(1.0, color="grey", linestyle=":", label="break-even")
    right.set_xlabel("num_speculative_tokens")
    right.set_ylabel("speedup (x)")
    right.set_title(f"verdict: {a.verdict}")
    right.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_bench(result: BenchResult, path: Path) -> None:
    """Speedup against concurrency with the break-even line, and the acceptance per position."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    levels = [p.concurrency for p in result.points]
    left.plot(levels, [p.speedup or 0 for p in result.points], "o-", label="measured speedup")
    left.axhline(1.0, color="grey", linestyle=":", label="break-even")
    left.set_xscale("log", base=2)
    left.set_xticks(levels, [str(c) for c in levels])
    left.set_xlabel("concurrency")
    left.set_ylabel("speedup (x, per-token time)")
    left.legend(loc="best")
    for p in result.points:
        prefix = p.analysis.prefix
        right.plot(
            range(1, len(prefix) + 1), [x * 100 for x in prefix], "o-", label=f"c={p.concurrency}"
        )
    right.set_xlabel("draft position")
    right.set_xticks(range(1, max((len(p.analysis.prefix) for p in result.points), default=1) + 1))
    right.set_ylabel("% of drafts accepted up to here")
    right.set_ylim(0, 105)
    right.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
