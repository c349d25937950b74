"""The ``pippa dash`` app and its factory (shared by the CLI and the tests).

``DashApp`` is put together from one class per concern (``dash.base`` has the map): the event pump
(``dash.pump``), the views (``dash.views``) and the run actions (``dash.actions``). Here: the layout,
the keys, and starting and stopping the host monitors with the app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header

from pippa_ops.dash.actions import RunActions
from pippa_ops.dash.base import Attach
from pippa_ops.dash.fleet import FleetView
from pippa_ops.dash.hostline import hosts_line
from pippa_ops.dash.pump import EventPump
from pippa_ops.dash.run_view import RunView
from pippa_ops.dash.views import Views
from pippa_ops.dash.widgets import HostPanel, RunsTable
from pippa_ops.monitor.host import HostState, Monitor, RunDetail

__all__ = ["Attach", "DashApp", "create_app"]

# The fleet view folds in and draws what the monitors sent meanwhile this often: one wake-up of the
# event loop per period however many hosts sample (GPUs are read once a second).
FLEET_REDRAW_S = 1.0
PANELS_CHECK_S = 1.0  # the host panels: which are scrolled into view (the others are sampled slowly)


class DashApp(RunActions, Views, EventPump):
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
        for host in self.hosts:
            self._draw_host(host)
        self.sub_title = hosts_line(self.hosts, self.states)
        self._draw_run()
        # Hosts whose panels do not fit the screen (a panel takes ~6 lines): the fleet view.
        self.show_fleet(len(self.hosts) * 6 > self.size.height - 2 if self.fleet is None else self.fleet)
        self.set_interval(FLEET_REDRAW_S, self._redraw_fleet)
        self.set_interval(PANELS_CHECK_S, self._check_panels)
        self.start_monitors()
        tables = self.query(RunsTable)
        if tables and not self.fleet:
            tables.first().focus()

    def on_unmount(self) -> None:
        for mon in self.monitors.values():
            mon.close()


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
