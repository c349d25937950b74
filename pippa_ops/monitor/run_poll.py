"""A host's run list and slower looks as one asyncio task on the dashboard's loop.

Each poll is a few request/answer round trips to the host agent (one agent kept per connection: no new
channel per poll); those block, so they go to the loop's executor, the one bounded pool of the whole
dashboard. Between polls the task only waits on the loop: a hidden run list, a down host and the
pause between polls cost no thread.
"""

from __future__ import annotations

import asyncio

from pippa_ops.errors import RemoteCommandFailed
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.monitor.link import LOST, Emit, Link, blocking, wait_for
from pippa_ops.monitor.looks import Looks
from pippa_ops.monitor.rows import Copies, run_row
from pippa_ops.monitor.state import RunsListed
from pippa_ops.runs.records.cost import Prices
from pippa_ops.runs.records.listing import HostRuns, RunRecord, list_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport


class RunPoll:
    """The run list every ``every_s`` seconds after the previous poll finished (``now``: at once)."""

    def __init__(self, spec: HostSpec, link: Link, every_s: float, copies: Copies) -> None:
        self.spec, self.link, self.every_s = spec, link, every_s
        self._prices = Prices(spec)  # runs' cost so far, where the host has a rate
        self._copies, self._looks = copies, Looks(spec)
        self.records: dict[str, RunRecord] = {}  # the followers read whether a run is still active
        self.shown, self.now = asyncio.Event(), asyncio.Event()
        self.shown.set()
        self._agent: agent_client.Session | None = None

    def _list(self, t: Transport) -> HostRuns | None:
        if self._agent is None or self._agent.transport is not t:
            self._agent = agent_client.Session(t)
        try:
            listing = self._prices.priced(list_runs(t, self.spec.remote_dir, agent=self._agent), t)
        except RemoteCommandFailed:
            return None  # no runs/ directory yet, or a broken run dir: show none, keep polling
        return self._copies.flag(listing)

    async def run(self, emit: Emit) -> None:
        link = self.link
        link.bind()
        while not link.closed.is_set():
            if not await wait_for(self.shown, 1.0):
                continue  # the run list is hidden (full-log view): nothing to poll for
            t = link.live()
            if t is None:
                await wait_for(link.up, 1.0)
                continue
            try:
                listing = await blocking(self._list, t)
                if listing is not None:
                    self.records = {r.run_id: r for r in listing.runs}
                    emit(
                        RunsListed(
                            self.spec.name, tuple(run_row(r, listing.now) for r in reversed(listing.runs))
                        )
                    )
                await blocking(self._looks.due, t, emit)  # the last doctor verdict, the armed stop
            except LOST as e:
                self._agent = None
                link.lose(e)
                continue
            await wait_for(self.now, self.every_s)
            self.now.clear()
