"""The dashboard flags a stale copy as ``ps`` does and shows, on the host line, what stop is armed and
when it fires (as ``pippa hosts`` does)."""

from __future__ import annotations

import re
import time

import dash_state as S
import pytest

from pippa_contract import states
from pippa_ops.dash import create_app
from pippa_ops.dash.widgets import RunsTable
from pippa_ops.monitor.rows import Copies, run_row
from pippa_ops.monitor.state import RunsListed, StopRead
from pippa_ops.runs.records.listing import HostRuns, RunRecord

RUN = "20260101-120000-tiny-ab12"


def _rec(host: str, state: str, **kw) -> RunRecord:
    return RunRecord(host, RUN, "tiny-ab12", "tiny", "train", state, **kw)


def test_copies_flag_the_old_hosts_copy_as_ps_does_once_both_hosts_are_listed() -> None:
    copies = Copies()
    old = HostRuns("h100-a", 100.0, runs=(_rec("h100-a", states.RUNNING),))
    assert copies.flag(old).runs[0].stale_of is None, "the new host not listed yet: nothing to compare"
    new = HostRuns("h100-b", 100.0, runs=(_rec("h100-b", states.RUNNING, moved_from="h100-a"),))
    assert copies.flag(new).runs[0].stale_of is None, "the live copy is never flagged"
    flagged = copies.flag(old)
    assert run_row(flagged.runs[0], 100.0).state == "stale copy (moved to h100-b)"
    ended = HostRuns("h100-a", 101.0, runs=(_rec("h100-a", states.MOVED, moved_to="h100-b"),))
    assert run_row(copies.flag(ended).runs[0], 101.0).state == "moved to h100-b"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(app, selector: str) -> str:
    return str(app.query_one(selector).render())


@pytest.mark.anyio
async def test_the_runs_table_shows_a_stale_copy_and_the_host_line_the_armed_stop() -> None:
    app = create_app(S.HOSTS, states=S.states())
    async with app.run_test(size=(200, 48)) as pilot:
        assert "stop" not in _text(app, "#host-0 .status"), "no stop command: nothing said"
        app._emit(StopRead(S.HOSTS[0], {"when": ["done", "idle:1800"]}, time.time()))
        await pilot.pause()
        assert _text(app, "#host-0 .status").endswith(" · stop on done, idle:1800")
        app._emit(
            StopRead(
                S.HOSTS[0], {"when": ["done"], "armed": {"trigger": "done"}, "in_s": 300}, time.time() - 48
            )
        )
        await pilot.pause()
        line = _text(app, "#host-0 .status")  # 300 s at the read, 48 s ago (the test's own time passes too)
        assert re.search(r" · stop armed \(done\): runs in 4m1[0-2]s, `pippa keep` cancels$", line), line
        copies = Copies()
        copies.flag(HostRuns("gpu-b", 0.0, runs=(_rec("gpu-b", states.RUNNING, moved_from=S.HOSTS[0]),)))
        old = copies.flag(HostRuns(S.HOSTS[0], 0.0, runs=(_rec(S.HOSTS[0], states.RUNNING, started=0.0),)))
        app._emit(RunsListed(S.HOSTS[0], tuple(run_row(r, 10.0) for r in old.runs)))
        await pilot.pause()
        table = app.query_one("#host-0").query_one(RunsTable)
        assert str(table.get_row_at(0)[0]) == "stale copy (moved to gpu-b)"
