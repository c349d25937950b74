"""Runs' curves drawn side by side: in the terminal with plotext (as the dashboard draws them) and as
a PNG with matplotlib, for sharing. Both put whole steps on the x axis and draw the smoothed curve
over the raw one when smoothing is on. plotext and matplotlib load only when a plot is drawn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pippa_ops.runs.reading.curves import Points, smooth, ticks_for_width

MARKERS = ("braille", "dot", "x", "+", "o", "*")  # one per run where colour is off
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _x_range(runs: Mapping[str, Points]) -> tuple[int, int]:
    xs = [p[0] for pts in runs.values() for p in pts]
    return (min(xs), max(xs)) if xs else (0, 1)


def terminal_plot(
    metric: str,
    runs: Mapping[str, Points],
    *,
    smoothing: float = 0.0,
    width: int = 100,
    height: int = 20,
    color: bool = True,
) -> str:
    """One metric, a curve per run (smoothed when ``smoothing`` > 0), as text."""
    import plotext as plt

    plt.clear_figure()
    plt.plotsize(width, height)
    plt.title(metric + (f" (EMA {smoothing:g})" if smoothing > 0 else ""))
    if not color:
        plt.theme("clear")
    drawn = False
    for i, (label, points) in enumerate(runs.items()):
        if not points:
            continue
        shown = smooth(points, smoothing)
        marker = "braille" if color else MARKERS[i % len(MARKERS)]
        plt.plot([p[0] for p in shown], [p[1] for p in shown], label=label, marker=marker)
        drawn = True
    if not drawn:
        return f"{metric}: no points in any of the runs\n"
    ticks = ticks_for_width(*_x_range(runs), width)
    plt.xticks(ticks, [str(t) for t in ticks])
    plt.xlabel("step")
    text = plt.build()
    return text if color else _ANSI.sub("", text)


def save_png(
    path: Path, metrics: Mapping[str, Mapping[str, Points]], *, smoothing: float = 0.0, title: str = ""
) -> None:
    """One panel per metric, a line per run (the raw curve faint under the smoothed one); written to
    a temporary name and renamed, so ``path`` is never a half-written image."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    n = max(1, len(metrics))
    fig, axes = plt.subplots(n, 1, figsize=(9, 3.2 * n), squeeze=False)
    try:
        for ax, (metric, runs) in zip(axes[:, 0], metrics.items(), strict=False):
            for i, (label, points) in enumerate(runs.items()):
                if not points:
                    continue
                colour = f"C{i % 10}"
                xs, ys = [p[0] for p in points], [p[1] for p in points]
                if smoothing > 0:
                    ax.plot(xs, ys, color=colour, alpha=0.25, linewidth=1)
                    ys = [p[1] for p in smooth(points, smoothing)]
                ax.plot(
                    xs, ys, color=colour, label=label, linewidth=1.8, marker="." if len(xs) < 30 else None
                )
            ax.set_title(metric + (f" (EMA {smoothing:g})" if smoothing > 0 else ""))
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
            if ax.has_data():
                ax.legend(fontsize="small")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.part-{os.getpid()}")
        try:
            fig.savefig(part, format="png", dpi=110)
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
    finally:
        plt.close(fig)
