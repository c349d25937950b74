"""The host widgets of ``pippa dash`` (a host's panel: its line, GPUs and runs table; the run pane is
``dash.run_view``): they draw state handed down by the app and never touch the network."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from pippa_contract.termsafe import escape
from pippa_ops.cli.table import Column, cut, fit
from pippa_ops.dash.hostline import status_line
from pippa_ops.monitor.state import GpuState, HostState, RunRow
from pippa_ops.runs.records.cost import money
from pippa_ops.runs.records.shortid import short_ids

BARS = "▁▂▃▄▅▆▇█"
SPARK = 12  # samples shown per sparkline


def sparkline(values: tuple[float, ...], width: int = SPARK, top: float = 100.0) -> str:
    """Block characters for the last ``width`` values on a 0..top scale, padded on the left."""
    shown = values[-width:]
    cells = [BARS[min(len(BARS) - 1, max(0, int(v / top * len(BARS))))] for v in shown]
    return " " * (width - len(cells)) + "".join(cells)


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def gpu_line(g: GpuState, width: int = 200) -> Text:
    """One GPU in one line of at most ``width``: util %, util sparkline, memory used/total, memory
    sparkline, temperature, power; the sparklines go (memory's first) where the line would wrap."""
    r = g.reading
    name = r.name.removeprefix("NVIDIA ")[:14]
    mem = (
        f"{r.mem_used_mib / 1024:4.1f}/{r.mem_total_mib / 1024:.0f}G"
        if r.mem_used_mib is not None and r.mem_total_mib is not None
        else "n/a"
    )
    heat = f" {_num(r.temp_c, '.0f', '°C'):>4} {_num(r.power_w, '.0f', 'W'):>4}"
    for util_spark, mem_spark in ((True, True), (True, False), (False, False)):
        line = Text()
        line.append(f"{r.index} {name:<14} ", style="bold")
        line.append(f"{_num(r.util_pct, '3.0f', '%'):>4} ")
        if util_spark:
            line.append(sparkline(g.util_history), style="green")
        line.append(f" {mem:>10}")
        if mem_spark:
            line.append(" ")
            line.append(sparkline(g.mem_history), style="cyan")
        line.append(heat)
        if line.cell_len <= width:
            break
    return line


def gpu_rows_room(screen_height: int) -> int:
    """How many GPU rows a host panel may take before the runs under them would be pushed out of
    view: a 24-line terminal keeps room for the runs of a host with 2 GPUs, not 8."""
    return max(2, (screen_height - 16) // 2)


def gpu_summary(gpus: tuple[GpuState, ...]) -> Text:
    """Many GPUs in one line: utilization and memory, one block per GPU (index order), and averages."""
    utils = [g.reading.util_pct for g in gpus]
    mems = [g.reading.mem_pct for g in gpus]
    known_u = [u for u in utils if u is not None]
    known_m = [m for m in mems if m is not None]
    line = Text()
    line.append(f"{len(gpus)} × {gpus[0].reading.name.removeprefix('NVIDIA ')[:14]}  ", style="bold")
    line.append("util ")
    line.append(sparkline(tuple(u or 0.0 for u in utils), width=len(gpus)), style="green")
    line.append(f" avg {sum(known_u) / len(known_u):.0f}%" if known_u else " n/a")
    line.append("  mem ")
    line.append(sparkline(tuple(m or 0.0 for m in mems), width=len(gpus)), style="cyan")
    line.append(f" avg {sum(known_m) / len(known_m):.0f}%" if known_m else " n/a")
    return line


def gpu_lines(h: HostState, *, collapse: bool, now: float | None = None, width: int = 200) -> Text:
    """A line per GPU (each at most ``width``), or a summary when room is short; a host that is down
    shows its last readings dimmed, with their age."""
    gpus = h.gpus or ()
    text = gpu_summary(gpus) if collapse else Text("\n").join(gpu_line(g, width) for g in gpus)
    if h.link != "down":
        return text
    text.stylize("dim")
    age = ""
    if h.sample_time is not None:
        age = f" from {_fmt_elapsed(max(0.0, (now if now is not None else time.time()) - h.sample_time))} ago"
    return Text.assemble(text, Text(f"\n(last readings{age})", style="dim italic"))


def _fmt_elapsed(s: float | None) -> str:
    if s is None:
        return ""
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# The run list's columns, fitted to the panel (cli.table.fit): a long state is cut with "…", then the
# optional columns go (recipe first), so the numbers and ids that stay are never cut or scrolled off.
RUN_COLUMNS = (
    Column("state", flex=True, min_width=10),
    Column("session", drop=1),  # what `pippa attach` takes: the last to go
    Column("run"),
    Column("step", drop=2, right=True),
    Column("reward", drop=3, right=True),
    Column("elapsed"),
    Column("recipe/cmd", flex=True, drop=4),
)


def run_cells(runs: tuple[RunRow, ...]) -> list[list[str]]:
    # Short ids (as `pippa ps` shows them, and every verb takes): a whole id does not fit a
    # half-width panel, and a cut one is no use; the run pane's title shows the whole id.
    names = short_ids([r.run_id for r in runs])
    return [
        [
            r.state,
            r.session or "-",
            names[r.run_id],
            "" if r.step is None else str(r.step),
            "" if r.last_reward is None else f"{r.last_reward:.3f}",
            _fmt_elapsed(r.elapsed_s) + ("" if r.cost is None else " " + money(r.cost, r.currency)),
            r.what,
        ]
        for r in runs
    ]


def _is_running(r: RunRow) -> bool:
    return r.state.startswith(("running", "queued", "pending", "starting"))


class RunsTable(DataTable[Text]):
    """A host's runs; arrows past the last (first) row move on to the next (previous) host's table."""

    def __init__(self, host: str) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, classes="runs")
        self.host = host
        self._shown: tuple[RunRow, ...] | None = None
        self._width = 0  # the width the columns were fitted to

    def on_mount(self) -> None:
        self._fill(())

    def on_resize(self) -> None:
        if self.size.width != self._width and self._shown is not None:
            self._fill(self._shown)

    def show(self, runs: tuple[RunRow, ...]) -> None:
        if runs == self._shown:
            return
        first = not self._shown
        self._fill(runs)
        if first:  # the run to look at first is a running one, not merely the newest
            running = next((i for i, r in enumerate(runs) if _is_running(r)), 0)
            self.move_cursor(row=running, animate=False)

    def _fill(self, runs: tuple[RunRow, ...]) -> None:
        selected = self.selected_run()
        self._shown, self._width = runs, self.size.width
        rows = [[escape(c) for c in cells] for cells in run_cells(runs)]  # host strings: no markup
        room = self.size.width or 200  # not laid out yet: fitted again on the first resize
        if len(runs) + 1 > 8:  # .runs max-height: a vertical scrollbar takes its columns
            room -= self.styles.scrollbar_size_vertical
        keep, widths = fit(RUN_COLUMNS, rows, room - 2)  # a DataTable pads each cell by 1 each side
        self.clear(columns=True)
        for i in keep:
            self.add_column(RUN_COLUMNS[i].name, width=widths[i])
        for r, cells in zip(runs, rows, strict=True):
            shown = [cut(cells[i], widths[i]) for i in keep]
            self.add_row(
                *(
                    Text(c.rjust(widths[i]) if RUN_COLUMNS[i].right else c)
                    for c, i in zip(shown, keep, strict=True)
                ),
                key=r.run_id,
            )
        ids = [r.run_id for r in runs]
        if selected in ids:
            self.move_cursor(row=ids.index(selected), animate=False)

    def selected_run(self) -> str | None:
        if not self._shown or self.cursor_row < 0 or self.cursor_row >= len(self._shown):
            return None
        return self._shown[self.cursor_row].run_id

    def _hop(self, step: int) -> None:
        """Focus the next (step 1) or previous (step -1) host's table that has runs."""
        tables = [t for t in self.screen.query(RunsTable) if t is self or t.row_count]
        i = tables.index(self) + step
        if 0 <= i < len(tables):
            target = tables[i]
            target.focus()
            target.move_cursor(row=0 if step > 0 else target.row_count - 1, animate=False)

    def action_cursor_down(self) -> None:
        if self.cursor_row >= self.row_count - 1:
            self._hop(1)
        else:
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if self.cursor_row <= 0:
            self._hop(-1)
        else:
            super().action_cursor_up()


class HostPanel(Vertical):
    """One host: link status, a line per GPU, its runs."""

    def __init__(self, host: str, index: int) -> None:
        # Host names may hold dots (addresses), which DOM ids may not: the id is the position.
        super().__init__(id=f"host-{index}", classes="host")
        self.host = host
        self.border_title = host
        self._state: HostState | None = None

    def compose(self) -> ComposeResult:
        yield Static(classes="status")
        yield Static(classes="gpus")
        yield RunsTable(self.host)

    def on_resize(self) -> None:
        state, self._state = self._state, None
        if state is not None:
            self.show(state)  # the GPU lines fit the new width

    def on_mount(self) -> None:
        self.on_resize()  # a state that came before the panel's lines existed

    def show(self, state: HostState) -> None:
        if state == self._state:
            return
        self._state = state
        if not self.children:  # not composed yet: on_mount draws it
            return
        self.query_one(".status", Static).update(status_line(state))
        gpus = self.query_one(".gpus", Static)
        gpus.display = bool(state.gpus)
        if state.gpus:
            collapse = len(state.gpus) > gpu_rows_room(self.app.size.height)
            gpus.update(gpu_lines(state, collapse=collapse, width=self.content_size.width or 200))
        self.set_class(state.link == "down", "down")
        self.query_one(RunsTable).show(state.runs)
