"""The run pane of ``pippa dash``: the selected run's title line, its curves and the tail of its log.
It draws state handed down by the app and never touches the network."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Grid, Vertical
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static
from textual_plotext import PlotextPlot

from pippa_ops.monitor.state import PLOTTED, SLOT_KEYS, RunDetail, RunRow
from pippa_ops.runs.reading.curves import smooth, ticks_for_width

Points = tuple[tuple[int, float], ...]

TITLES = {
    "reward/mean": "reward",
    "loss/total": "loss",
    "completions/mean_length": "completion length",
    "grad/norm": "grad norm",
    "rewards/margins": "DPO reward margin",
    "rewards/accuracies": "DPO preference accuracy",
    "policy/token_accuracy": "SFT token accuracy",
    "game/invalid_rate": "games ended by an invalid move",
}
# What a narrow plot is titled (plotext draws no title at all where the whole one does not fit).
SHORT_TITLES = {
    "completion length": "length",
    "grad norm": "grad",
    "DPO reward margin": "margin",
    "DPO preference accuracy": "pref. acc",
    "SFT token accuracy": "token acc",
    "games ended by an invalid move": "invalid",
}
Y_LABELS = 7  # columns plotext's y tick labels take, at most ("-0.512┤"): the title centres on the rest


def perf_line(perf: dict[str, float]) -> str:
    """The step's speed in one line: generation's share of the step, each phase's tokens/s, the corrected
    MFU of the train phase with HFU (the whole step's) beside it; "" before a run logs them."""
    parts = []
    if "perf/gen_share" in perf:
        parts.append(f"generation {100 * perf['perf/gen_share']:.0f}% of the step")
    if "perf/gen_tokens_per_s" in perf:
        parts.append(f"gen {perf['perf/gen_tokens_per_s']:,.0f} tok/s")
    if "perf/train_tokens_per_s" in perf:
        parts.append(f"train {perf['perf/train_tokens_per_s']:,.0f} tok/s")
    if "perf/mfu" in perf:
        hfu = f" (HFU {100 * perf['perf/hfu']:.1f}%)" if "perf/hfu" in perf else ""
        parts.append(f"MFU {100 * perf['perf/mfu']:.1f}%{hfu}")
    return " · ".join(parts)


def plot_title(title: str, smoothing: float, width: int) -> str:
    """The longest of the plot's titles that fits ``width`` (plotext centres a title on the canvas)."""
    short = SHORT_TITLES.get(title, title)
    ema = [f"{title} (EMA {smoothing:g})", f"{title} (EMA)", f"{short} (EMA)"] if smoothing > 0 else []
    room = width - Y_LABELS - 2
    return next((t for t in [*ema, title, short] if len(t) <= room), short)


def flat_ticks(values: list[float]) -> list[float] | None:
    """Round y ticks around a curve that does not move (v - d, v, v + d; d a power of ten), else None."""
    if not values or max(values) - min(values) > 1e-9 * max(1.0, abs(values[0])):
        return None
    v = values[0]
    d = 10.0 ** math.floor(math.log10(abs(v))) if v else 1.0
    return [round(v - d, 12), v, round(v + d, 12)]


class MetricPlot(PlotextPlot):
    """One curve against whole steps (EMA-smoothed when asked), with eval points when the key has them."""

    def __init__(self, key: str) -> None:
        super().__init__(id="plot-" + key.replace("/", "-"), classes="plot")
        self.key = key
        self._points: Points | None = None
        self._smoothing = 0.0
        self._steps: tuple[int, int] | None = None  # the x range, ticked at render time (width known)
        self._title = TITLES[key]  # titled at render time too
        self.flat_ticks: list[float] | None = None  # the y ticks of a flat curve (round numbers)

    def show(
        self, points: Points, evals: dict[str, Points], smoothing: float = 0.0, key: str | None = None
    ) -> None:
        if points == self._points and smoothing == self._smoothing and not evals:
            return
        self._points, self._smoothing = points, smoothing
        plt = self.plt
        plt.clear_data()
        self._title = TITLES[key or self.key]
        steps = [p[0] for p in points] + [p[0] for pts in evals.values() for p in pts]
        self.flat_ticks = None
        if points:
            shown = smooth(points, smoothing)
            plt.plot([p[0] for p in shown], [p[1] for p in shown], marker="braille")
            values = [p[1] for p in shown] + [p[1] for pts in evals.values() for p in pts]
            self.flat_ticks = flat_ticks(values)
            if self.flat_ticks is not None:  # plotext would spread a flat line over 1e-16 of axis
                plt.ylim(self.flat_ticks[0], self.flat_ticks[-1])
                plt.yticks(self.flat_ticks, [f"{t:g}" for t in self.flat_ticks])
        if self.key == "reward/mean":
            for key, pts in evals.items():
                plt.scatter([p[0] for p in pts], [p[1] for p in pts], marker="●", label=key)
        self._steps = (min(steps), max(steps)) if steps else None
        self.refresh()

    def render(self) -> RenderResult:
        self.plt.title(plot_title(self._title, self._smoothing, self.size.width))
        if self._steps is not None:
            ticks = ticks_for_width(*self._steps, self.size.width)
            self.plt.xticks([float(t) for t in ticks], [str(t) for t in ticks])
        return super().render()


class LogTailView(Widget):
    """The newest lines of the log that fit: cut at render time, so it is right at any height."""

    lines: reactive[tuple[str, ...]] = reactive(())

    def render(self) -> Text:
        return Text.from_ansi("\n".join(self.lines[-max(1, self.size.height) :]), no_wrap=True)


class RunView(Vertical):
    """The selected run: title line with the W&B link, four curves, the tail of its log."""

    def compose(self) -> ComposeResult:
        yield Static("No run selected: move to a run with ↑/↓ and press enter.", id="run-title")
        with Grid(id="plots"):
            for key in PLOTTED:
                yield MetricPlot(key)
        yield Static("", id="run-sample", markup=False)  # the newest sample's first line (key w: all)
        yield LogTailView(id="log-tail")

    def show_sample_line(self, line: str) -> None:
        sample = self.query_one("#run-sample", Static)
        sample.update(line)
        sample.display = bool(line)

    def show(self, detail: RunDetail | None, row: RunRow | None, smoothing: float = 0.0) -> None:
        title = self.query_one("#run-title", Static)
        plots = self.query_one("#plots", Grid)
        log = self.query_one(LogTailView)
        if detail is None:
            title.update("No run selected: move to a run with ↑/↓ and press enter.")
            plots.display = False
            self.show_sample_line("")
            log.lines = ()
            return
        head = Text()
        head.append(detail.run_id, style="bold")
        head.append(f" on {detail.host}")
        # How the run ended comes from its exit code (ps's state), not from what its metrics last said.
        state = row.state if row else detail.end_status
        if state:
            head.append(f" · {state}")
        if detail.wandb_url:
            head.append(" · W&B: ")
            head.append(detail.wandb_url, style=f"underline link {detail.wandb_url}")
        if detail.perf:
            head.append("\n" + perf_line(detail.perf), style="dim")
        if not detail.has_metrics:
            head.append("\nno metrics file (plain command or not started): log only", style="dim")
        title.update(head)
        plots.display = detail.has_metrics
        if detail.has_metrics:
            for plot in self.query(MetricPlot):
                keys = SLOT_KEYS.get(plot.key, (plot.key,))
                key = next((k for k in keys if detail.series.get(k)), plot.key)
                plot.show(detail.series.get(key, ()), detail.evals, smoothing, key)
        log.lines = detail.log_tail
