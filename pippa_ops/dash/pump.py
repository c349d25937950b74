"""The dashboard's event pump: the host monitors run on the app's loop and their events become state.

Each host's GPU feed and run poll are asyncio workers on Textual's loop (``monitor.host``); what
blocks in them runs in the loop's executor, sized here once for the whole fleet, so threads do not
grow with hosts. Their events go to a queue, not one message each: in the fleet view it is folded in
and drawn once a second; with the panels shown the loop is woken once for whatever is queued.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from textual import on
from textual.message import Message

from pippa_contract import states
from pippa_ops.dash.base import DashBase
from pippa_ops.dash.fleet import FleetView
from pippa_ops.dash.hostline import hosts_line
from pippa_ops.monitor.host import HostEvent, RunRow, RunsListed, RunUpdated, apply
from pippa_ops.monitor.state import ended_runs

# The one executor of the dashboard: the monitors' blocking calls (a connection's handshake, starting
# a stream, a run poll's round trips) and the thread workers (the selected run's followers, its
# samples line, the full log, a stop). A few stay busy while a run is followed; the rest are shared
# by every host's short calls.
DASH_WORKERS = 10


class EventsWaiting(Message):
    """Events from the host monitors are queued (``DashBase._events``): fold them in now."""


class EventPump(DashBase):
    def start_monitors(self) -> None:
        """Every host's GPU feed and run poll, as asyncio workers on this loop."""
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=DASH_WORKERS, thread_name_prefix="dash")
        )
        for host, mon in self.monitors.items():
            gpus, runs = mon.stream_gpus(self._emit), mon.poll(self._emit)
            self.run_worker(gpus, exclusive=True, group=f"gpu:{host}", name=f"gpu:{host}")
            self.run_worker(runs, exclusive=True, group=f"poll:{host}", name=f"poll:{host}")

    def _emit(self, event: HostEvent | RunUpdated) -> None:
        """From the loop or a thread: queued; with the panels shown the loop is woken once for it all."""
        self._events.append(event)
        if not self.fleet and not self._drain_asked:
            self._drain_asked = True
            self.post_message(EventsWaiting())

    @on(EventsWaiting)
    def _drain(self) -> None:
        self._drain_asked = False
        while self._events:
            self._handle_update(self._events.popleft())

    def _redraw_fleet(self) -> None:
        """Every FLEET_REDRAW_S: fold in what is queued and draw the fleet view once."""
        self._drain()
        if self.fleet and self._fleet_dirty:
            self._fleet_dirty = False
            self.query_one(FleetView).show([self.states[h] for h in self.hosts])

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

    def _tell_ended(self, host: str, row: RunRow) -> None:
        """A run ended: bell, a line, and a desktop notification where the laptop has one."""
        from pippa_ops import notify

        line = f"{host}: run {row.run_id} ({row.what[:40]}) {row.state}"
        self.bell()
        ok = row.state.startswith(states.FINISHED)
        self.notify(line, title="run ended", severity="information" if ok else "warning", timeout=15)
        self.run_worker(partial(notify.desktop, line), thread=True, group="desktop-notice", name="notice")
