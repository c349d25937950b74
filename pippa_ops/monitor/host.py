"""Per-host monitors for the dashboard: one connection per host, the streams on it, typed events out.

Core: no textual, rich or typer. A ``HostMonitor`` puts together what one host needs, each part in its
module: the link (``monitor.link``: the connection, up or lost), the GPU feed (``monitor.gpu_feed``:
nvidia-smi's loop, which supervises the link), the run poll (``monitor.run_poll``) and the followers of
the selected run (``monitor.follow``). The feed and the poll are coroutines the dashboard runs on its
own event loop; blocking calls go to the loop's executor, one bounded pool for every host, so threads
do not grow with hosts. The app folds each event into its state with ``monitor.state.apply``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pippa_contract import verbs
from pippa_ops.errors import HostUnreachable, PippaError
from pippa_ops.gpu import Gpu
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.monitor.follow import Followers, Sink
from pippa_ops.monitor.gpu_feed import GpuFeed, indexed
from pippa_ops.monitor.link import Emit, Link, reason_of
from pippa_ops.monitor.rows import Copies
from pippa_ops.monitor.run_poll import RunPoll
from pippa_ops.monitor.state import (
    GpuSampled,
    GpuState,
    HostEvent,
    HostState,
    LinkChanged,
    RunDetail,
    RunRow,
    RunsListed,
    RunUpdated,
    apply,
)
from pippa_ops.runs.launching.launch import stop
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport

if TYPE_CHECKING:
    from pippa_contract.messages import SamplesAnswer, SamplesRequest

__all__ = [
    "Gpu",
    "GpuSampled",
    "GpuState",
    "HostEvent",
    "HostMonitor",
    "HostState",
    "LinkChanged",
    "Monitor",
    "RunDetail",
    "RunRow",
    "RunUpdated",
    "RunsListed",
    "apply",
    "indexed",
    "reason_of",
]

RUNS_EVERY_S = 3.0  # the run list is refreshed this often (after the previous poll finished)
# A host off screen (the fleet view scrolled past it, or filtered out) is sampled slowly: what is not
# drawn is not worth a core; it comes back to the full rate as soon as it is visible again.
OFFSCREEN_GPU_S, OFFSCREEN_RUNS_S = 8.0, 15.0


class Monitor(Protocol):
    """What the dashboard needs from a host monitor: two coroutines it runs on its loop until
    ``close``, and blocking calls it makes from thread workers (``follow``, ``follow_log``, ...)."""

    name: str

    async def stream_gpus(self, emit: Emit) -> None: ...
    async def poll(self, emit: Emit) -> None: ...
    def follow(self, run_id: str, emit: Emit) -> None: ...
    def select(self, run_id: str | None) -> None: ...
    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None: ...
    def samples(self, run_id: str, request: SamplesRequest) -> SamplesAnswer: ...
    def stop_run(self, run_id: str) -> str: ...
    def reconnect_now(self) -> None: ...
    def set_shown(self, shown: bool) -> None: ...
    def set_visible(self, visible: bool) -> None: ...
    def close(self) -> None: ...


class HostMonitor:
    """One host, one connection: the GPU feed supervises it (connect, backoff, reconnect); the run
    poll and the followers wait for it to be up and resume where they stopped after a reconnect."""

    def __init__(
        self,
        spec: HostSpec,
        *,
        interval_s: float = 1.0,
        runs_every_s: float = RUNS_EVERY_S,
        opener: Callable[[HostSpec], Transport] | None = None,
        copies: Copies | None = None,  # shared by a dashboard's monitors: stale copies are flagged
    ) -> None:
        self.name, self.spec = spec.name, spec
        self.link = Link(spec, opener or open_transport)
        self.gpus = GpuFeed(self.link, interval_s)
        self.runs = RunPoll(spec, self.link, runs_every_s, copies or Copies())
        self.followers = Followers(self.link, lambda: self.runs.records)
        self._rates = (interval_s, runs_every_s)  # on screen; off screen: OFFSCREEN_*

    @property
    def interval_s(self) -> float:
        return self.gpus.interval_s

    @property
    def runs_every_s(self) -> float:
        return self.runs.every_s

    async def stream_gpus(self, emit: Emit) -> None:
        """Until ``close``: the GPU samples, and the link kept up (``monitor.gpu_feed``)."""
        await self.gpus.run(emit)

    async def poll(self, emit: Emit) -> None:
        """Until ``close``: the run list and the slower looks while the link is up (``monitor.run_poll``)."""
        await self.runs.run(emit)

    def lose(self, error: BaseException) -> None:
        """From any thread: the connection failed; the GPU feed hangs up and reconnects."""
        self.link.lose(error)

    def select(self, run_id: str | None) -> None:
        self.followers.select(run_id)

    def follow(self, run_id: str, emit: Emit) -> None:
        self.followers.follow(run_id, emit)

    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None:
        self.followers.follow_log(run_id, sink, cancelled)

    def samples(self, run_id: str, request: SamplesRequest) -> SamplesAnswer:
        """What the model wrote in run ``run_id`` (``verbs.samples``: one request, read from the file's
        end on the host); raises HostUnreachable while the host is down."""
        t = self.link.live()
        if t is None:
            raise HostUnreachable(f"{self.name} is unreachable")
        req: SamplesRequest = {**request, "remote_dir": self.spec.remote_dir, "name": run_id}
        return verbs.samples(agent_client.Once(t), req)

    def stop_run(self, run_id: str) -> str:
        t = self.link.live()
        if t is None:
            return f"{self.name} is unreachable: run {run_id} not stopped"
        try:
            r = stop(self.spec, t, run_id)
        except PippaError as e:
            return str(e)
        state = r.after.state_text if r.after else "gone"
        return f"{self.name}: {run_id} {state}"

    def reconnect_now(self) -> None:
        self.link.on_loop(self.link.wake.set)

    def set_shown(self, shown: bool) -> None:
        """Whether the run list is on screen; while it is not, it is not polled."""
        self.link.on_loop(self.runs.shown.set if shown else self.runs.shown.clear)

    def set_visible(self, visible: bool) -> None:
        """On screen: the full rate; off screen: GPU every OFFSCREEN_GPU_S, runs every OFFSCREEN_RUNS_S.
        The GPU stream restarts at the new rate on the same connection; a host that comes into view
        is polled at once."""
        gpu_s, runs_s = self._rates if visible else (OFFSCREEN_GPU_S, OFFSCREEN_RUNS_S)
        if (gpu_s, runs_s) == (self.interval_s, self.runs_every_s):
            return
        self.runs.every_s = runs_s

        def apply_rate() -> None:
            self.gpus.restart(gpu_s)
            if visible:
                self.runs.now.set()

        self.link.on_loop(apply_rate)

    def close(self) -> None:
        self.followers.select(None)
        self.link.on_loop(self.runs.now.set)
        self.link.close()
