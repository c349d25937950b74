"""The dashboard at 80x24 with an 8-GPU host (issue 26): the runs stay in view (the GPUs collapse to
one summary line when space is short), a flat curve gets round axis labels, a host that went down
shows its last GPU readings dimmed with their age."""

from __future__ import annotations

import dash_state as S
import pytest

from pippa_ops.dash import create_app
from pippa_ops.dash.run_view import MetricPlot, flat_ticks
from pippa_ops.dash.widgets import RunsTable, gpu_lines
from pippa_ops.monitor.host import LinkChanged, RunDetail, apply
from pippa_ops.runs.reading.curves import ema

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_ema_of_a_constant_is_the_constant_and_its_axis_is_round() -> None:
    assert ema([1.0] * 50, 0.6) == [1.0] * 50
    assert ema([0.1] * 50, 0.9) == [0.1] * 50
    assert flat_ticks([1.0, 1.0]) == [0.0, 1.0, 2.0]
    assert flat_ticks([0.375] * 3) == [0.275, 0.375, 0.475]
    assert flat_ticks([0.0]) == [-1.0, 0.0, 1.0]
    assert flat_ticks([1.0, 1.5]) is None


async def test_at_80x24_an_8_gpu_host_collapses_its_gpus_and_keeps_its_runs_in_view() -> None:
    app = create_app(S.EIGHT_HOSTS, states=S.eight_states())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gpus = str(app.query_one("#host-0 .gpus").render())
        assert gpus.startswith("8 × H100 80GB HBM3") and "util" in gpus and len(gpus.splitlines()) == 1
        table = app.query_one("#host-0").query_one(RunsTable)
        assert table.row_count == 3
        region = table.region
        assert region.height >= 3 and region.y + region.height <= 24  # on screen, header and rows
    wide = create_app(S.EIGHT_HOSTS, states=S.eight_states())
    async with wide.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert len(str(wide.query_one("#host-0 .gpus").render()).splitlines()) == 8  # room: a row each


def test_a_down_hosts_last_gpu_readings_are_dimmed_with_their_age() -> None:
    state = apply(S.host_eight(), LinkChanged("gpu-8", "down", "timed out", 5.0))
    assert state.sample_time is not None
    text = gpu_lines(state, collapse=False, now=state.sample_time + 75)
    assert text.plain.endswith("\n(last readings from 1m15s ago)")
    readings = len(text.plain) - len("\n(last readings from 1m15s ago)")
    assert any(str(sp.style) == "dim" and sp.start == 0 and sp.end >= readings for sp in text.spans)
    live = gpu_lines(S.host_eight(), collapse=False)
    assert "last readings" not in live.plain and not any(str(sp.style) == "dim" for sp in live.spans)


async def test_a_flat_curve_gets_round_y_ticks_smoothed_or_not() -> None:
    detail = RunDetail(
        host="gpu-8",
        run_id="20260101-120000-tiny-ab12",
        has_metrics=True,
        series={"reward/mean": tuple((s, 1.0) for s in range(1, 30))},
    )
    app = create_app(S.EIGHT_HOSTS, states=S.eight_states(), detail=detail)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        plot = app.query_one("#plot-reward-mean", MetricPlot)
        assert plot.flat_ticks == [0.0, 1.0, 2.0]
        await pilot.press("e")  # EMA on
        await pilot.pause()
        assert plot.flat_ticks == [0.0, 1.0, 2.0]


def test_80x24_with_an_8_gpu_host(snap_compare) -> None:
    assert snap_compare(create_app(S.EIGHT_HOSTS, states=S.eight_states()), terminal_size=(80, 24))


async def test_at_80x24_moving_the_selection_to_a_lower_host_scrolls_it_into_view() -> None:
    states = {"gpu-8": S.host_eight(), "gpu-a": S.host_a(), "local": S.host_local()}
    app = create_app(("gpu-8", "gpu-a", "local"), states=states)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        hosts = app.query_one("#hosts").region
        for _ in range(5):  # through gpu-8's three runs into gpu-a's
            await pilot.press("down")
            await pilot.pause()
            table = app.focused
            assert isinstance(table, RunsTable)
            row_y = table.region.y + 1 + table.cursor_row - int(table.scroll_y)  # under the header
            assert hosts.y <= row_y < hosts.y + hosts.height, (table.host, table.cursor_row)
        assert (table.host, table.selected_run()) == ("gpu-a", S.FAILED_RUN)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 48)])
async def test_run_ids_in_the_runs_list_are_short_and_whole(size) -> None:
    from textual.geometry import Region

    from pippa_ops.runs.records.shortid import short_ids

    app = create_app(S.HOSTS, states=S.states(), detail=S.detail())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.query_one("#host-0").query_one(RunsTable)
        lines = table.render_lines(Region(0, 0, table.size.width, table.size.height))
        shown = "\n".join(line.text for line in lines)
        names = short_ids([r.run_id for r in S.runs_listed("gpu-a").runs])
        for name in names.values():
            assert f" {name} " in shown, (size, shown)  # whole, never cut by a character
