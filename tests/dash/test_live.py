"""The dashboard against real OpenSSH hosts on loopback (tests/sshd.py), with Pilot.

Each host gets an ``nvidia-smi`` on its PATH that replays a real H100 capture in loop mode
(fake_smi.py); everything else is real: asyncssh, sshd, tmux, the trainer on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import fake_smi
import pytest
from textual.widgets import Log

from pippa_ops.dash import DashApp, create_app
from pippa_ops.dash.screens import ConfirmStop
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import resolve
from pippa_ops.monitor.host import HostMonitor
from pippa_ops.runs.launching.launch import launch

pytestmark = [pytest.mark.ssh, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    """Pilot runs under anyio's pytest plugin, on asyncio (see tests/dash/test_app.py)."""
    return "asyncio"


async def _until(pilot, cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        await pilot.pause(0.1)


def _status(app: DashApp, i: int) -> str:
    """The host panel's status line; "" while the panel is being (re)built and has none yet."""
    from textual.css.query import NoMatches

    try:
        return str(app.query_one(f"#host-{i} .status").render())
    except NoMatches:
        return ""


def _monitors(names: list[str]) -> dict[str, HostMonitor]:
    return {n: HostMonitor(resolve(n), interval_s=1.0, runs_every_s=1.0) for n in names}


async def test_gpu_rows_then_a_dead_host_shows_unreachable_and_recovers(ssh_hosts, ssh_env) -> None:
    t1, t2 = ssh_hosts[0], ssh_hosts[1]
    for h in (t1, t2):
        h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
    app = create_app([t1.name, t2.name], _monitors([t1.name, t2.name]))
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: all("2 GPUs" in _status(app, i) for i in (0, 1)), 30, "GPU rows on both")
        gpus = str(app.query_one("#host-0 .gpus").render())
        assert "H100 80GB HBM3" in gpus and "100%" in gpus and "19.4/80G" in gpus and "632W" in gpus

        t2.drop()
        await _until(pilot, lambda: "unreachable (" in _status(app, 1), 30, "t2 unreachable")
        assert "retrying in" in _status(app, 1)
        # The other host keeps streaming while t2 is down.
        before = app.states[t1.name].sample_time or 0.0
        await _until(pilot, lambda: (app.states[t1.name].sample_time or 0) > before + 1.5, 10, "t1 samples")

        t2.start()
        await pilot.press("r")  # reconnect now instead of waiting out the backoff
        await _until(pilot, lambda: "2 GPUs" in _status(app, 1), 30, "t2 back up")


async def test_tiny_run_shows_in_the_list_and_its_reward_curve_grows(ssh_hosts, ssh_env) -> None:
    t3 = ssh_hosts[2]
    spec = resolve(t3.name)
    with open_transport(spec) as transport:
        result = launch(
            spec,
            transport,
            recipes=["tiny"],
            session="dashtest",
            replace=True,
            sets=["train.max_steps=1000", "eval.interval=6", "eval.n=4"],
            sync=False,
        )
    # Long enough to still be running while the app watches (the test stops it below): a run that
    # finished before the first read would hand over its whole curve at once.
    run_id = result.run_ids[0]
    app = create_app([t3.name], _monitors([t3.name]))
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: app.selected == (t3.name, run_id), 30, "the run listed and selected")
        assert any(r.run_id == run_id and r.what == "tiny" for r in app.states[t3.name].runs)

        def points() -> int:
            return len(app.detail.series.get("reward/mean", ())) if app.detail else 0

        seen: set[int] = set()

        def grown() -> bool:  # the curve gained points while we watched (not all in one read)
            seen.add(points())
            return len(seen - {0}) >= 2

        await _until(pilot, grown, 180, "the reward curve growing")
        plot = app.query_one("#plot-reward-mean")
        assert plot._points is not None and len(plot._points) >= 2
        assert app.detail is not None and app.detail.log_tail, "the output log tail is shown"

        await pilot.press("l")  # the full log, followed while shown
        log = app.screen.query_one("#full-log", Log)
        await _until(pilot, lambda: log.line_count > 0, 20, "the full log")
        await pilot.press("escape")

        await pilot.press("s")  # stop asks first; yes stops the run on the host
        assert isinstance(app.screen, ConfirmStop)
        await pilot.press("y")

        def state() -> str:
            return next((r.state for r in app.states[t3.name].runs if r.run_id == run_id), "")

        await _until(pilot, lambda: state() and not state().startswith("running"), 60, "the run stopped")
