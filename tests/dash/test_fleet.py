"""The fleet view (one line per host) through the app factory: how many hosts fit, each line's
fields, filtering by typing part of a name and opening the host, sorting, and that hosts off screen
are told to sample slowly."""

from __future__ import annotations

import pytest

from pippa_ops.dash import create_app
from pippa_ops.dash.fleet import FleetView, fleet_row
from pippa_ops.dash.widgets import HostPanel, RunsTable
from pippa_ops.monitor.host import Gpu, GpuSampled, HostState, LinkChanged, RunRow, RunsListed, apply
from pippa_ops.monitor.state import DoctorRead

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _host(i: int) -> HostState:
    name = f"node{i:02d}"
    state = HostState(name)
    gpus = tuple(
        Gpu(
            g,
            "NVIDIA H100 80GB HBM3",
            90.0 if g < i % 9 else 0.0,
            60000.0 if g < i % 9 else 0.0,
            81559.0,
            50.0,
            300.0,
        )
        for g in range(8)
    )
    state = apply(state, LinkChanged(name, "up"))
    state = apply(state, GpuSampled(name, gpus, 1e9))
    runs = (RunRow(f"run-{i}", "gsm8k", "running (attempt 2/4)", "s", 120 + i, 0.5),)
    if i % 7 == 3:
        runs += (RunRow(f"bad-{i}", "gsm8k", "failed"),)
    return apply(state, RunsListed(name, runs))


HOSTS = [_host(i) for i in range(64)]


class Rates:
    """A monitor stand-in that records only what the app asks of its sampling rate."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.visible: bool | None = None

    def set_visible(self, visible: bool) -> None:
        self.visible = visible

    async def stream_gpus(self, emit) -> None: ...  # type: ignore[no-untyped-def]
    async def poll(self, emit) -> None: ...  # type: ignore[no-untyped-def]

    def __getattr__(self, _: str):  # type: ignore[no-untyped-def]
        return lambda *a, **k: None


def _app(n: int, monitors: dict[str, Rates] | None = None):  # type: ignore[no-untyped-def]
    hosts = HOSTS[:n]
    app = create_app([h.name for h in hosts], monitors, states={h.name: h for h in hosts})  # type: ignore[arg-type]
    return app


def test_a_line_has_state_gpus_counts_runs_and_the_newest_problem() -> None:
    line = fleet_row(HOSTS[3], 120).plain
    assert line.startswith("node03") and " up " in line
    assert "3/5" in line  # 3 busy, 5 idle
    assert "run-3 s123 r0.50 a2" in line and "bad-3 failed" in line
    down = apply(HOSTS[5], LinkChanged("node05", "down", "connection refused", 4.0))
    assert "down" in fleet_row(down, 120).plain and "connection refused" in fleet_row(down, 120).plain
    key = apply(HOSTS[5], LinkChanged("node05", "down", "host key for node05 changed", 4.0))
    assert " key " in fleet_row(key, 120).plain
    assert " - " in line  # no doctor verdict known yet
    assert " fail " in fleet_row(apply(HOSTS[3], DoctorRead("node03", "fail")), 120).plain


def test_at_80_columns_the_running_run_comes_first_and_a_failed_run_shows_its_name() -> None:
    """A failed run beside a running one used to push the running run out and show the failed run's
    id cut (its start time took the room): the running run is whole, then the failed run's name."""
    h = apply(
        HOSTS[1],
        RunsListed(
            "node01",
            (
                RunRow("20261126-185651-gsm8k-ab12", "gsm8k", "running", "s", 120, 0.5),
                RunRow("20261126-101010-gsm8k-cd34", "gsm8k", "failed (exit 1: CUDA out of memory)"),
            ),
        ),
    )
    line = fleet_row(h, 80).plain
    assert len(line) <= 80 and line.split()[-3:] == ["gsm8k-ab12", "gsm8k-cd34", "failed"], line
    wide = fleet_row(h, 120).plain
    assert "gsm8k-ab12 s120 r0.50 gsm8k-cd34 failed (exit 1: CUDA out of memory)" in wide, wide
    alone = fleet_row(apply(h, RunsListed("node01", h.runs[:1])), 80).plain
    assert alone.rstrip().endswith("gsm8k-ab12 s120 r0.50"), alone


@pytest.mark.parametrize(("size", "least"), [((80, 24), 18), ((160, 48), 40)])
async def test_enough_hosts_fit(size: tuple[int, int], least: int) -> None:
    app = _app(64)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert app.fleet
        screen = str(app.query_one(FleetView).render())
        shown = [h.name for h in HOSTS if h.name in screen]
        assert len(shown) >= least, screen


async def test_typing_part_of_a_name_then_enter_opens_that_host() -> None:
    app = _app(32)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", "e", "2", "7")  # "e" would be the app's smoothing key
        fleet = app.query_one(FleetView)
        assert fleet.highlighted == "node27" and app.smoothing == 0.0
        assert "node03" not in str(fleet.render())
        await pilot.press("enter")
        await pilot.pause()
        assert not app.fleet
        panel = app.query_one("#host-27", HostPanel)
        assert panel.display and not app.query_one("#host-3", HostPanel).display  # that host alone
        assert isinstance(app.focused, RunsTable) and app.focused.host == "node27"
        await pilot.press("f")
        assert app.fleet


async def test_sort_by_problems_and_idle() -> None:
    app = _app(20)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        fleet = app.query_one(FleetView)
        assert fleet.highlighted == "node03"  # the first of the hosts with a failed run
        await pilot.press("i")
        assert fleet.highlighted in ("node00", "node09", "node18")  # all 8 GPUs idle


async def test_hosts_off_screen_are_sampled_slowly() -> None:
    monitors = {h.name: Rates(h.name) for h in HOSTS}
    app = _app(64, monitors)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert monitors["node00"].visible is True and monitors["node63"].visible is False
        await pilot.press("end")
        await pilot.pause()
        assert monitors["node63"].visible is True and monitors["node00"].visible is False
