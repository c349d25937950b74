"""Which view the dashboard shows (the fleet view or the host panels) and which hosts are on screen.

A host that is not drawn (scrolled past, filtered out, or hidden while another host's panel is opened
alone) is sampled slowly by its monitor (``HostMonitor.set_visible``); the run lists are not polled
while the full-log view hides them.
"""

from __future__ import annotations

from textual import on
from textual.containers import VerticalScroll

from pippa_ops.dash.base import DashBase
from pippa_ops.dash.fleet import FleetView
from pippa_ops.dash.screens import MainHidden
from pippa_ops.dash.widgets import HostPanel, RunsTable

# While the fleet filter is being typed, these keys type letters instead.
APP_KEYS = frozenset({"attach", "log", "stop", "reconnect", "smooth", "fleet", "help", "quit"})


class Views(DashBase):
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

    def _check_panels(self) -> None:
        """With the panels shown, hosts whose panel is scrolled out of view (or hidden: another
        host's panel opened alone) are sampled slowly, as off-screen rows of the fleet view are."""
        if self.fleet or not self.monitors:
            return
        scroll = self.query_one("#hosts", VerticalScroll)
        top, bottom = scroll.scroll_y, scroll.scroll_y + scroll.size.height
        visible = frozenset(
            self.hosts[i]
            for i, panel in enumerate(self.query(HostPanel))
            if panel.display and panel.virtual_region.y < bottom and panel.virtual_region.bottom > top
        )
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

    @on(MainHidden)
    def _main_hidden(self, message: MainHidden) -> None:
        for mon in self.monitors.values():
            mon.set_shown(not message.hidden)
