"""The dashboard's part of the daily loop: a notice when a run ends, the `e` smoothing toggle, whole
steps on the curves' x axis (Pilot, deterministic state)."""

from __future__ import annotations

import re
from dataclasses import replace

import dash_state as S
import pytest

from pippa_ops.dash import create_app
from pippa_ops.monitor.host import RunsListed, RunUpdated
from pippa_ops.monitor.state import ended_runs

pytestmark = pytest.mark.anyio
RUNNING = "20260101-120000-tiny-ab12"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _listing(state: str) -> RunsListed:
    rows = S.runs_listed("gpu-a").runs
    return RunsListed("gpu-a", tuple(replace(r, state=state) if r.run_id == RUNNING else r for r in rows))


def test_only_a_run_that_was_active_counts_as_ended() -> None:
    running, failed = _listing("running").runs, _listing("failed (exit 1)").runs
    assert [r.run_id for r in ended_runs(running, failed)] == [RUNNING]
    assert ended_runs((), failed) == [] and ended_runs(failed, failed) == []
    assert ended_runs(running, running) == []


async def test_a_run_that_ends_rings_and_shows_one_line() -> None:
    app = create_app(S.HOSTS, states=S.states())
    rings: list[int] = []
    app.bell = lambda: rings.append(1)  # type: ignore[method-assign]  # a terminal bell has no state to read
    async with app.run_test(size=(160, 48)) as pilot:
        app._emit(_listing("running"))
        await pilot.pause()
        assert not app._notifications and not rings  # still running: nothing to tell
        app._emit(_listing("failed (exit 1)"))
        await pilot.pause()
        (note,) = list(app._notifications)
        assert note.message == f"gpu-a: run {RUNNING} (tiny) failed (exit 1)" and note.severity == "warning"
        assert rings == [1]


async def test_e_toggles_ema_smoothing_of_the_curves_and_the_x_axis_shows_whole_steps() -> None:
    detail = S.detail()
    bumpy = tuple((s, float(s % 2)) for s in range(1, 13))  # 0/1 alternating: the EMA flattens it
    detail = replace(detail, series={**detail.series, "reward/mean": bumpy})
    app = create_app(S.HOSTS, states=S.states(), detail=detail)
    async with app.run_test(size=(160, 48)) as pilot:
        app._emit(RunUpdated(detail))
        await pilot.pause()
        plot = app.query_one("#plot-reward-mean")
        raw = str(plot.render())
        assert "EMA" not in raw
        ticks = re.findall(r"^\s*((?:\d+\s+)*\d+)\s*$", raw, flags=re.M)
        assert ticks and all(t.isdigit() for t in ticks[-1].split())  # the step axis: integers only
        await pilot.press("e")
        await pilot.pause()
        smoothed = str(plot.render())
        assert app.smoothing == 0.6 and "reward (EMA 0.6)" in smoothed
        assert smoothed.splitlines()[1:] != raw.splitlines()[1:]  # the curve itself, not only its title
        await pilot.press("e")
        await pilot.pause()
        assert app.smoothing == 0.0 and "EMA" not in str(plot.render())
