"""What the dashboard's parts share: its state, and drawing that state into the widgets.

``DashApp`` (``dash.app``) is put together from one class per concern, each a subclass of this one:
the event pump (``dash.pump``: the monitors' events into state), the views (``dash.views``: fleet
view or host panels, and which hosts are on screen) and the run actions (``dash.actions``: selection,
attach, log, stop). Attributes flow down, messages flow up; widgets never touch the network.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence

from textual.app import App

from pippa_ops.dash.run_view import RunView
from pippa_ops.dash.widgets import HostPanel
from pippa_ops.monitor.host import HostEvent, HostState, Monitor, RunDetail, RunRow, RunUpdated

Attach = Callable[[str, str], object]  # (host, tmux session) -> runs the same attach as `pippa attach`


class DashBase(App[None]):
    """The dashboard's state: every host's ``HostState``, the selected run and its detail, the view."""

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
        # Monitors append (from the loop or a thread worker), the event loop drains: a GPU sample
        # costs no message of its own.
        self._events: deque[HostEvent | RunUpdated] = deque()
        self._drain_asked = False
        self._panels_visible: frozenset[str] | None = None

    def _emit(self, event: HostEvent | RunUpdated) -> None:
        """The event pump's (``dash.pump.EventPump``): the one way monitors' events reach the state."""
        raise NotImplementedError

    def _draw_host(self, host: str) -> None:
        # query, not query_one: a late message may arrive while the app is closing its screen.
        for panel in self.query(f"#host-{self.hosts.index(host)}").results(HostPanel):
            panel.show(self.states[host])

    def _draw_run(self) -> None:
        for view in self.query(RunView):
            view.show(self.detail, self.selected_row(), self.smoothing)

    def selected_row(self) -> RunRow | None:
        if self.selected is None:
            return None
        host, run_id = self.selected
        return next((r for r in self.states[host].runs if r.run_id == run_id), None)
