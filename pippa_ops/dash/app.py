"""The ``pippa dash`` app and its factory (shared by the CLI and the tests).

Attributes flow down, messages flow up: thread workers run the blocking ``HostMonitor`` loops and
post ``MonitorUpdate`` messages; the app folds them into ``HostState`` values with ``monitor.apply`` and
hands each panel its state (and the header every host's line). Widgets never touch the network.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Header

from pippa_contract import states
from pippa_ops.dash.fleet import FleetView
from pippa_ops.dash.hostline import hosts_line
from pippa_ops.dash.screens import ConfirmStop, HelpScreen, LogScreen, MainHidden
from pippa_ops.dash.widgets import HostPanel, RunsTable, RunView
from pippa_ops.monitor.host import (
    HostEvent,
    HostState,
    Monitor,
    RunDetail,
    RunRow,
    RunsListed,
    RunUpdated,
    apply,
)
from pippa_ops.monitor.state import ended_runs
from pippa_ops.runs.reading.curves import DASH_SMOOTHING

APP_KEYS = frozenset({"attach", "log", "stop", "reconnect", "smooth", "fleet", "help", "quit"})
# The fleet view folds in and draws what the monitors sent meanwhile this often: one wake-up of the
# event loop per period however many hosts sample (GPUs are read once a second).
FLEET_REDRAW_S = 1.0
PANELS_CHECK_S = 1.0  # the host panels: which are scrolled into view (the others are sampled slowly)
Attach = Callable[[str, str], object]  # (host, tmux session) -> runs the same attach as `pippa attach`


class EventsWaiting(Message):
    """Events from the host monitors are queued (``DashApp._events``): fold them in now."""


class DashApp(App[None]):
    CSS_PATH = Path(__file__).with_name("dash.tcss")
    TITLE = "pippa dash"
    # Below 120 columns the run view goes under the hosts instead of beside them (see dash.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012 - Textual declares it so
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "attach", "attach"),
        Binding("l", "log", "full log"),
        Binding("s", "stop", "stop"),
        Binding("r", "reconnect", "reconnect"),
        Binding("e", "smooth", "smooth"),
        Binding("w", "samples", "samples", show=False),  # what the model wrote (dash.samples_screen)
        Binding("f", "fleet", "fleet", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        hosts: Sequence[str],
        monitors: Mapping[str, Monitor] | None = None,
        *,
        states: Mapping[str, HostState] | None = None,
        detail: RunDetail | None = None,
        attach: Attach | None = None,
    ) -> None:
        super().__init__()
        self.hosts = tuple(hosts)
        self.monitors = dict(monitors or {})
        self.states = {h: (states or {}).get(h, HostState(h)) for h in self.hosts}
        self.detail = detail
        self.selected: tuple[str, str] | None = (detail.host, detail.run_id) if detail else None
        self._attacher = attach
        self.smoothing = 0.0  # EMA weight of the curves; `e` toggles DASH_SMOOTHING
        self.fleet: bool | None = None  # the fleet view is shown (None: decided by the screen's size)
        self._fleet_dirty = False
        self._panels_stale: set[str] = set()
        # Monitor threads append, the event loop drains: a GPU sample costs no message of its own.
        self._events: deque[HostEvent | RunUpdated] = deque()
        self._drain_asked = False
        self._panels_visible: frozenset[str] | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield FleetView(id="fleet")
        with Horizontal(id="main"):
            with VerticalScroll(id="hosts"):
                for i, host in enumerate(self.hosts):
                    yield HostPanel(host, i)
            yield RunView(id="run")
        yield Footer()

    def on_mount(self) -> None:
        # Thread workers run in the loop's default executor, min(32, cores + 4) threads: on a 2-core
        # laptop that is 6, fewer than 4 hosts' long-lived loops. Size it for every stream we run:
        # per host the GPU stream and the run poll, plus two followers and the full-log view.
        workers = 2 * len(self.monitors) + 8
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dash")
        )
        for host in self.hosts:
            self._draw_host(host)
        self.sub_title = hosts_line(self.hosts, self.states)
        self._draw_run()
        # Hosts whose panels do not fit the screen (a panel takes ~6 lines): the fleet view.
        self.show_fleet(len(self.hosts) * 6 > self.size.height - 2 if self.fleet is None else self.fleet)
        self.set_interval(FLEET_REDRAW_S, self._redraw_fleet)
        self.set_interval(PANELS_CHECK_S, self._check_panels)
        for host, mon in self.monitors.items():
            self.run_worker(
                partial(mon.stream_gpus, self._emit), thread=True, exclusive=True, group=f"gpu:{host}",
                name=f"gpu:{host}",
            )
            self.run_worker(
                partial(mon.poll, self._emit), thread=True, exclusive=True, group=f"poll:{host}",
                name=f"poll:{host}",
            )
        tables = self.query(RunsTable)
        if tables and not self.fleet:
            tables.first().focus()

    def on_unmount(self) -> None:
        for mon in self.monitors.values():
            mon.close()

    # ----------------------------------------------------------------------------- state from workers
    def _emit(self, event: HostEvent | RunUpdated) -> None:
        """From any thread: queued; with the panels shown the loop is woken once for what is queued."""
        self._events.append(event)
        if not self.fleet and not self._drain_asked:
            self._drain_asked = True
            self.post_message(EventsWaiting())

    @on(EventsWaiting)
    def _drain(self) -> None:
        self._drain_asked = False
        while self._events:
            self._handle_update(self._events.popleft())

    def _handle_update(self, event: HostEvent | RunUpdated) -> None:
        if isinstance(event, RunUpdated):
            d = event.detail
            if self.selected == (d.host, d.run_id):
                self.detail = d
                self._draw_run()
            return
        host = event.host
        if host not in self.states:
            return
        if isinstance(event, RunsListed):
            for row in ended_runs(self.states[host].runs, event.runs):
                self._tell_ended(host, row)
        self.states[host] = apply(self.states[host], event)
        self.sub_title = hosts_line(self.hosts, self.states)  # every host on the first line, whatever fits
        if self.fleet:  # drawn in batches (``_redraw_fleet``); the panels once they are shown again
            self._fleet_dirty = True
            self._panels_stale.add(host)
        else:
            self._draw_host(host)
        if self.selected and self.selected[0] == host:
            self._draw_run()

    def _draw_host(self, host: str) -> None:
        # query, not query_one: a late message may arrive while the app is closing its screen.
        for panel in self.query(f"#host-{self.hosts.index(host)}").results(HostPanel):
            panel.show(self.states[host])

    def _draw_run(self) -> None:
        for view in self.query(RunView):
            view.show(self.detail, self.selected_row(), self.smoothing)

    def _tell_ended(self, host: str, row: RunRow) -> None:
        """A run ended: bell, a line, and a desktop notification where the laptop has one."""
        from pippa_ops import notify

        line = f"{host}: run {row.run_id} ({row.what[:40]}) {row.state}"
        self.bell()
        self.notify(line, title="run ended", severity="information" if row.state.startswith(states.FINISHED)
                    else "warning", timeout=15)  # fmt: skip
        self.run_worker(partial(notify.desktop, line), thread=True, group="desktop-notice", name="notice")

    # ------------------------------------------------------------------------------------ fleet view
    def show_fleet(self, on: bool, *, only: str | None = None) -> None:
        """The fleet view (one line per host), or the host panels (``only``: that host's)."""
        self.fleet = on
        for i, panel in enumerate(self.query(HostPanel)):
            shown = only is None or self.hosts[i] == only
            if panel.display != shown:
                panel.display = shown
        fleet = self.query_one(FleetView)
        fleet.display = on
        self.query_one("#main").display = not on
        if on:
            fleet.show([self.states[h] for h in self.hosts])
            fleet.focus()
        else:
            for host in sorted(self._panels_stale):
                self._draw_host(host)
            self._panels_stale.clear()
            self._panels_visible = None
            self._check_panels()

    def _redraw_fleet(self) -> None:
        self._drain()
        if self.fleet and self._fleet_dirty:
            self._fleet_dirty = False
            self.query_one(FleetView).show([self.states[h] for h in self.hosts])

    def _check_panels(self) -> None:
        """With the panels shown, hosts whose panel is scrolled out of view (or hidden: another
        host's panel opened alone) are sampled slowly, as off-screen rows of the fleet view are."""
        if self.fleet or not self.monitors:
            return
        scroll = self.query_one("#hosts", VerticalScroll)
        top, bottom = scroll.scroll_y, scroll.scroll_y + scroll.size.height
        visible = frozenset(
            self.hosts[i] for i, panel in enumerate(self.query(HostPanel))
            if panel.display and panel.virtual_region.y < bottom and panel.virtual_region.bottom > top
        )  # fmt: skip
        if visible == self._panels_visible:
            return
        self._panels_visible = visible
        for host, mon in self.monitors.items():
            mon.set_visible(host in visible)

    @on(FleetView.Visible)
    def _fleet_visible(self, message: FleetView.Visible) -> None:
        if self.fleet:
            for host, mon in self.monitors.items():
                mon.set_visible(host in message.hosts)

    @on(FleetView.Open)
    def _fleet_open(self, message: FleetView.Open) -> None:
        self.open_host(message.host)

    def open_host(self, host: str) -> None:
        """That host's panel alone (``f`` goes back to the fleet), its runs focused."""
        self.show_fleet(False, only=host)
        for table in self.query(f"#host-{self.hosts.index(host)} RunsTable").results(RunsTable):
            table.focus()

    def action_fleet(self) -> None:
        self.show_fleet(not self.fleet)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While the fleet filter is being typed, letters are the filter's, not the app's keys."""
        fleet = self.query(FleetView)
        typing = bool(fleet) and fleet.first().filtering
        return not (typing and action in APP_KEYS)

    # -------------------------------------------------------------------------------------- selection
    def selected_row(self) -> RunRow | None:
        if self.selected is None:
            return None
        host, run_id = self.selected
        return next((r for r in self.states[host].runs if r.run_id == run_id), None)

    def select(self, host: str, run_id: str | None) -> None:
        """Follow this run's metrics and log (and stop following the previous one)."""
        new = (host, run_id) if run_id else None
        if new == self.selected:
            return
        self.selected = new
        for h, other in self.monitors.items():
            other.select(run_id if h == host else None)
        self.detail = RunDetail(host, run_id) if run_id else None
        self._draw_run()
        mon = self.monitors.get(host)
        if run_id and mon is not None:
            self.run_worker(
                partial(mon.follow, run_id, self._emit), thread=True, exclusive=True, group=f"follow:{host}",
                name=f"follow:{run_id}",
            )
            self._follow_sample_line(host, run_id)

    def _follow_sample_line(self, host: str, run_id: str) -> None:
        from pippa_ops.dash.samples_screen import follow_sample_line

        follow_sample_line(self, host, run_id)

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        table = event.data_table
        if isinstance(table, RunsTable):
            self.select(table.host, table.selected_run())

    @on(events.DescendantFocus)
    def _table_focused(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, RunsTable) and event.widget.row_count:
            self.select(event.widget.host, event.widget.selected_run())

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        table = event.data_table
        if isinstance(table, RunsTable) and table.has_focus:
            self.select(table.host, table.selected_run())

    @on(MainHidden)
    def _main_hidden(self, message: MainHidden) -> None:
        for mon in self.monitors.values():
            mon.set_shown(not message.hidden)

    # ---------------------------------------------------------------------------------------- actions
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_smooth(self) -> None:
        self.smoothing = 0.0 if self.smoothing else DASH_SMOOTHING
        self._draw_run()
        self.notify(f"curves smoothed (EMA {DASH_SMOOTHING:g})" if self.smoothing else "curves raw")

    def action_reconnect(self) -> None:
        for mon in self.monitors.values():
            mon.reconnect_now()
        self.notify("reconnecting unreachable hosts now")

    def action_attach(self) -> None:
        row = self.selected_row()
        if self.selected is None or row is None:
            self.notify("select a run first", severity="warning")
            return
        if not row.session or row.state.partition(" ")[0] != states.RUNNING:  # "running (attempt 2/4)"
            self.notify(f"{row.run_id} has no live tmux session", severity="warning")
            return
        if self._attacher is None:
            self.notify("attach is not available here", severity="error")
            return
        host = self.selected[0]
        with self.suspend():
            self._attacher(host, row.session)

    def action_log(self) -> None:
        if self.selected is None:
            self.notify("select a run first", severity="warning")
            return
        host, run_id = self.selected
        mon = self.monitors.get(host)
        follow = partial(mon.follow_log, run_id) if mon else None
        self.push_screen(LogScreen(host, run_id, follow))

    def action_samples(self) -> None:
        if self.selected is None:
            self.notify("select a run first", severity="warning")
            return
        from pippa_ops.dash.samples_screen import SamplesScreen

        host, run_id = self.selected
        mon = self.monitors.get(host)
        fetch = partial(mon.samples, run_id) if mon is not None and hasattr(mon, "samples") else None
        self.push_screen(SamplesScreen(host, run_id, fetch))

    def action_stop(self) -> None:
        row = self.selected_row()
        if self.selected is None or row is None:
            self.notify("select a run first", severity="warning")
            return
        host = self.selected[0]

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(host, row.run_id)

        self.push_screen(ConfirmStop(host, row.run_id), answered)

    def _stop(self, host: str, run_id: str) -> None:
        mon = self.monitors.get(host)
        if mon is None:
            return

        def work() -> None:
            message = mon.stop_run(run_id)
            self.call_from_thread(self.notify, message)

        self.run_worker(work, thread=True, group=f"stop:{host}", name=f"stop:{run_id}")


def create_app(
    hosts: Sequence[str],
    monitors: Mapping[str, Monitor] | None = None,
    *,
    states: Mapping[str, HostState] | None = None,
    detail: RunDetail | None = None,
    attach: Attach | None = None,
) -> DashApp:
    """The one way to build the dashboard: the CLI passes live monitors, the tests pass state."""
    return DashApp(hosts, monitors, states=states, detail=detail, attach=attach)
