"""Pilot tests of the dashboard fed with deterministic state through the app factory."""

from __future__ import annotations

import time

import dash_state as S
import pytest
from textual.widgets import Log

from pippa_ops.dash import create_app
from pippa_ops.dash.run_view import MetricPlot
from pippa_ops.dash.screens import ConfirmStop, HelpScreen, LogScreen
from pippa_ops.dash.widgets import HostPanel, RunsTable, sparkline
from pippa_ops.monitor.host import Gpu, GpuSampled, LinkChanged, RunDetail, RunUpdated
from pippa_ops.monitor.state import DoctorRead

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Pilot runs under anyio's pytest plugin, on asyncio (here, not in a tests/dash conftest.py: a
    second module named ``conftest`` shadows tests/conftest.py, which tests/ops import from)."""
    return "asyncio"


def _text(app, selector: str) -> str:
    return str(app.query_one(selector).render())


async def test_each_host_has_a_panel_with_status_gpus_and_runs() -> None:
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(160, 48)):
        panels = list(app.query(HostPanel))
        assert [p.host for p in panels] == list(S.HOSTS)
        a = app.query_one("#host-0")
        assert "up, 2 GPUs" in str(a.query_one(".status").render())
        gpus = str(a.query_one(".gpus").render())
        assert "H100 80GB HBM3" in gpus and "°C" in gpus and "/80G" in gpus
        assert a.query_one(RunsTable).row_count == 3
        assert f"unreachable ({S.DOWN_REASON}), retrying in 8s" in str(
            app.query_one("#host-1 .status").render()
        )
        assert "no GPU" in str(app.query_one("#host-2 .status").render())


async def test_the_host_line_shows_the_last_doctor_verdict_and_its_age() -> None:
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(160, 48)) as pilot:
        assert "doctor" not in _text(app, "#host-0 .status"), "no verdict stored: nothing said"
        app._emit(DoctorRead(S.HOSTS[0], "fail", time.time() - 3 * 3600))
        await pilot.pause()
        assert _text(app, "#host-0 .status") == "● up, 2 GPUs · doctor fail 3h ago"
        app._emit(DoctorRead(S.HOSTS[0], "ok", time.time() - 20))
        await pilot.pause()
        assert _text(app, "#host-0 .status").endswith(" · doctor ok 20s ago")
        assert "doctor" not in _text(app, "#host-1 .status")


async def test_gpu_samples_from_a_worker_update_the_panel_and_history() -> None:
    app = create_app(["gpu-a"])
    async with app.run_test() as pilot:
        for u in (10.0, 50.0, 90.0):
            reading = Gpu(0, "NVIDIA A100", u, 1000.0, 40000.0, 50.0, 200.0)
            app._emit(GpuSampled("gpu-a", (reading,), 1.0))
            await pilot.pause()
        g = app.states["gpu-a"].gpus
        assert g is not None and g[0].reading.util_pct == 90.0
        assert len(g[0].util_history) >= 1
        assert " 90%" in str(app.query_one("#host-0 .gpus").render())
        app._emit(LinkChanged("gpu-a", "down", "timed out", 4.0))
        await pilot.pause()
        assert "unreachable (timed out), retrying in 4s" in str(app.query_one("#host-0 .status").render())
        assert app.query_one("#host-0").has_class("down")


async def test_selecting_a_run_shows_its_curves_link_and_log() -> None:
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(160, 48)) as pilot:
        # The first host's table has focus, so its first run is selected from the start.
        await pilot.press("enter")
        assert app.selected == ("gpu-a", "20260101-120000-tiny-ab12")
        app._emit(RunUpdated(S.detail()))
        await pilot.pause()
        title = str(app.query_one("#run-title").render())
        assert "https://wandb.ai/team/pippa/runs/ab12" in title
        reward = app.query_one("#plot-reward-mean", MetricPlot)
        assert reward._points is not None and len(reward._points) == 42
        assert "step 42" in str(app.query_one("#log-tail").render())
        await pilot.press("down")  # highlight moves: the next run is selected
        assert app.selected == ("gpu-a", "20260101-110000-cmd-cd34")


async def test_a_run_without_metrics_still_shows_its_log() -> None:
    d = RunDetail("gpu-a", "20260101-110000-cmd-cd34", log_tail=("hello",))
    app = create_app(S.HOSTS, states=S.states(), detail=d)
    async with app.run_test(size=(160, 48)):
        assert not app.query_one("#plots").display
        assert "log only" in str(app.query_one("#run-title").render())
        assert "hello" in str(app.query_one("#log-tail").render())


async def test_arrows_move_from_one_hosts_runs_to_the_next() -> None:
    states = S.states()
    states["local"] = S.apply(states["local"], S.runs_listed("local"))
    app = create_app(S.HOSTS, states=states)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("down", "down", "down")
        assert isinstance(app.focused, RunsTable) and app.focused.host == "local"
        assert app.selected is not None and app.selected[0] == "local"


async def test_keys_help_stop_confirm_and_log_screens() -> None:
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("enter", "s")
        assert isinstance(app.screen, ConfirmStop)
        await pilot.press("n")  # answered no: nothing is stopped, back on the main screen
        assert not isinstance(app.screen, ConfirmStop)
        await pilot.press("l")
        assert isinstance(app.screen, LogScreen)
        await pilot.press("escape")
        footer = app.screen.query_one("Footer")
        assert footer is not None
        await pilot.press("q")
    assert app.return_code == 0


def test_sparkline_scales_and_pads() -> None:
    assert sparkline((0.0, 100.0), width=4) == "  ▁█"


class _Recorder:
    """A Monitor that only records what the app asks of it (no IO): the app/monitor contract."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, object]] = []

    async def stream_gpus(self, emit) -> None: ...
    async def poll(self, emit) -> None: ...
    def follow(self, run_id, emit) -> None:
        self.calls.append(("follow", run_id))

    def select(self, run_id) -> None:
        self.calls.append(("select", run_id))

    def follow_log(self, run_id, sink, cancelled) -> None:
        sink(b"line one\nline two\n")

    def stop_run(self, run_id) -> str:
        self.calls.append(("stop", run_id))
        return "stopped"

    def reconnect_now(self) -> None:
        self.calls.append(("reconnect", None))

    def set_shown(self, shown: bool) -> None:
        self.calls.append(("shown", shown))

    def set_visible(self, visible: bool) -> None:
        self.calls.append(("visible", visible))

    def close(self) -> None:
        self.calls.append(("close", None))


async def test_selection_follows_one_run_the_full_log_pauses_polling_and_stop_needs_yes() -> None:
    mons = {h: _Recorder(h) for h in S.HOSTS}
    app = create_app(S.HOSTS, mons, states=S.states())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        a = mons["gpu-a"].calls
        assert ("select", "20260101-120000-tiny-ab12") in a and ("follow", "20260101-120000-tiny-ab12") in a
        assert ("select", None) in mons["gpu-b"].calls  # the other hosts follow nothing
        await pilot.press("l")
        await pilot.pause()
        assert ("shown", False) in a  # run lists hidden: not polled
        assert app.screen.query_one(Log).line_count == 2
        await pilot.press("escape")
        await pilot.pause()
        assert [c for c in a if c[0] == "shown"][-1] == ("shown", True)  # a visibility check may come after
        await pilot.press("s", "n")
        await pilot.pause()
        assert not any(c[0] == "stop" for c in a)
        await pilot.press("s", "y")
        await app.workers.wait_for_complete()
        assert ("stop", "20260101-120000-tiny-ab12") in a
        await pilot.press("r")
        assert all(("reconnect", None) in m.calls for m in mons.values())
    assert all(("close", None) in m.calls for m in mons.values())


async def test_host_panels_scrolled_out_of_view_are_sampled_slowly_until_scrolled_to() -> None:
    hosts = [f"h{i:02}" for i in range(12)]
    mons = {h: _Recorder(h) for h in hosts}
    app = create_app(hosts, mons)
    app.fleet = False  # the panels, though they do not all fit

    def last_visible(host: str) -> bool | None:
        said = [v for what, v in mons[host].calls if what == "visible"]
        return said[-1] if said else None

    async def wait_until(cond, what: str) -> None:
        for _ in range(100):
            if cond():
                return
            await pilot.pause(0.05)
        raise AssertionError(what)

    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(lambda: last_visible("h11") is False and last_visible("h00") is True, "h11 slow")
        app.query_one("#hosts").scroll_end(animate=False)
        await wait_until(lambda: last_visible("h11") is True and last_visible("h00") is False, "h00 slow")


def _visible_text(widget) -> str:
    """What the widget shows on screen now (its rendered lines), not the text it was given."""
    from textual.geometry import Region

    lines = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(line.text for line in lines)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 48)])
async def test_each_runs_state_and_session_are_on_screen_and_unreachable_text_is_whole(size) -> None:
    app = create_app(S.HOSTS, states=S.states(), detail=S.detail())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.query_one("#host-0").query_one(RunsTable)
        shown = _visible_text(table)
        for state in ("running", "finished (exit 0)", "failed (exit 1)"):
            assert state in shown, (size, shown)
        assert "tiny-ab12" in shown  # the tmux session, what `pippa attach` takes
        status = _visible_text(app.query_one("#host-1 .status"))
        assert S.DOWN_REASON.split()[-1] in status and "retrying in 8s" in status, status


async def test_the_run_view_says_how_the_run_ended_from_its_exit_code_not_its_metrics() -> None:
    from dataclasses import replace

    failed = S.runs_listed("gpu-a").runs[2]
    detail = replace(S.detail(), run_id=failed.run_id, end_status="finished")  # metrics said so, exit 1
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()  # the first table's cursor selects its first run on mount
        app.select("gpu-a", failed.run_id)
        app._emit(RunUpdated(detail))
        await pilot.pause()
        title = _visible_text(app.query_one("#run-title"))
        assert "failed (exit 1)" in title and "finished" not in title
