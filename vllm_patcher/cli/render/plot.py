"""``--plot FILE.png``: payoff's report (the acceptance curve, the measured speedup and, for
shorter drafts, the range between the two cost models), ``payoff bench``'s or ``payoff sweep``'s
(matplotlib, the optional ``plot`` extra, imported only here, when a command draws)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import BadSetting, NotWritable

if TYPE_CHECKING:
    from ...load.bench import BenchResult
    from ...payoff.analysis import Analysis
    from ...sweep.result import SweepResult


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
    if a.speedup is not None:
        for kk, (lo, hi) in a.shorter_k_range.items():
            right.plot([kk, kk], [lo, hi], "-", color="tab:blue", linewidth=6, alpha=0.5)
        if a.shorter_k_range:
            right.plot([], [], "-", color="tab:blue", linewidth=6, alpha=0.5,
                       label="two cost models (not measured)")  # fmt: skip
        right.plot([a.k], [a.speedup], "r*", markersize=14, label="measured")
        right.set_xticks(list(range(1, a.k + 1)) or [a.k])
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
    _save(plt, fig, path)


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
    _save(plt, fig, path)


def draw_sweep(result: SweepResult, path: Path) -> None:
    """Measured speedup (per-token time, against k = 0) against concurrency, one line per k,
    each repeat's spread as a bar, with the break-even line; and each k's acceptance per
    position at the lowest concurrency."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    levels = result.concurrencies
    for k in result.ks:
        points = [(c, result.cells[(k, c)]) for c in levels if (k, c) in result.cells]
        if not k or not points:
            continue
        xs = [c for c, _ in points]
        ys = [p.speedup or 0.0 for _, p in points]
        spreads = [p.series() for _, p in points]
        first = next(iter(spreads[0])) if spreads else ""
        low = [y - min(s[first] or [y]) for y, s in zip(ys, spreads, strict=True)]
        high = [max(s[first] or [y]) - y for y, s in zip(ys, spreads, strict=True)]
        left.errorbar(xs, ys, yerr=[low, high], fmt="o-", capsize=3, label=f"k = {k}")
    left.axhline(1.0, color="grey", linestyle=":", label="break-even (k = 0)")
    left.set_xscale("log", base=2)
    left.set_xticks(levels, [str(c) for c in levels])
    left.set_xlabel("concurrency")
    left.set_ylabel("speedup against k = 0 (x, per-token time)")
    left.legend(loc="best")  # the break-even line has a label whatever was judged
    lowest = levels[0]
    for k in result.ks:
        cell = result.cells.get((k, lowest))
        if cell is not None:
            prefix = cell.analysis.prefix
            right.plot(range(1, len(prefix) + 1), [x * 100 for x in prefix], "o-", label=f"k = {k}")
    right.set_xlabel(f"draft position (concurrency {lowest})")
    right.set_xticks(range(1, max(result.ks) + 1))
    right.set_ylabel("% of drafts accepted up to here")
    right.set_ylim(0, 105)
    if right.get_legend_handles_labels()[0]:  # nothing judged: no curve, no empty legend
        right.legend(loc="best")
    _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> None:
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise NotWritable(
            f"cannot write the plot {path}: {exc.strerror or exc}; give --plot a file in a "
            "folder that can be written"
        ) from None
    finally:
        plt.close(fig)
