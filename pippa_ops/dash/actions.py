"""What the user does with a run: select it (its metrics and log are followed), attach, read its full
log or its samples, stop it; and the keys that act on every host (reconnect, smoothing, help)."""

from __future__ import annotations

from functools import partial

from textual import events, on
from textual.widgets import DataTable

from pippa_contract import states
from pippa_ops.dash.base import DashBase
from pippa_ops.dash.screens import ConfirmStop, HelpScreen, LogScreen
from pippa_ops.dash.widgets import RunsTable
from pippa_ops.monitor.host import RunDetail
from pippa_ops.runs.reading.curves import DASH_SMOOTHING


class RunActions(DashBase):
    # ------------------------------------------------------------------------------------ selection
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
            follow = partial(mon.follow, run_id, self._emit)
            self.run_worker(
                follow, thread=True, exclusive=True, group=f"follow:{host}", name=f"follow:{run_id}"
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

    # -------------------------------------------------------------------------------------- actions
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
