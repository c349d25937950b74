"""Per-host monitors for the dashboard: one connection per host, the streams on it, typed events out.

Core: no textual, rich or typer. The dashboard's thread workers call the blocking ``HostMonitor``
loops and post the events they emit; the app folds each event into its state with
``monitor.state.apply``. One host, one SSH connection: the GPU stream
(nvidia-smi's own loop on one channel) supervises it, with backoff; the run poll and the followers
wait for it and resume from their byte offsets after a reconnect.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from pippa_contract import rundir as rd
from pippa_contract import verbs
from pippa_contract.rundir import RunDir
from pippa_ops.errors import (
    AuthFailed,
    HostKeyRejected,
    HostUnreachable,
    PippaError,
    RemoteCommandFailed,
    ToolMissing,
)
from pippa_ops.gpu import Gpu, GpuStream
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.monitor.looks import Looks
from pippa_ops.monitor.rows import Copies, run_row
from pippa_ops.monitor.state import (
    GpuSampled,
    GpuState,
    HostEvent,
    HostState,
    LinkChanged,
    LogTail,
    MetricsParser,
    RunDetail,
    RunRow,
    RunsListed,
    RunUpdated,
    apply,
)
from pippa_ops.runs.launching.launch import stop
from pippa_ops.runs.records.cost import Prices
from pippa_ops.runs.records.follow import Follower
from pippa_ops.runs.records.listing import RunRecord, list_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.retry import retry_delay
from pippa_ops.transport.shell import validate_name

if TYPE_CHECKING:
    from pippa_contract.messages import SamplesAnswer, SamplesRequest

__all__ = [
    "Gpu", "GpuSampled", "GpuState", "HostEvent", "HostMonitor", "HostState", "LinkChanged",
    "Monitor", "RunDetail", "RunRow", "RunUpdated", "RunsListed", "apply",
]  # fmt: skip

# ------------------------------------------------------------------------------------------- monitors
Emit = Callable[[HostEvent | RunUpdated], None]
Sink = Callable[[bytes], None]
RUNS_EVERY_S = 3.0  # the run list is refreshed this often (after the previous poll finished)
# A host off screen (the fleet view scrolled past it, or filtered out) is sampled slowly: what is not
# drawn is not worth a core; it comes back to the full rate as soon as it is visible again.
OFFSCREEN_GPU_S, OFFSCREEN_RUNS_S = 8.0, 15.0
LOST = (HostUnreachable, AuthFailed, HostKeyRejected, OSError, EOFError, TimeoutError)


class Monitor(Protocol):
    """What the dashboard needs from a host monitor; the loop methods block until ``close``."""

    name: str

    def stream_gpus(self, emit: Emit) -> None: ...
    def poll(self, emit: Emit) -> None: ...
    def follow(self, run_id: str, emit: Emit) -> None: ...
    def select(self, run_id: str | None) -> None: ...
    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None: ...
    def samples(self, run_id: str, request: SamplesRequest) -> SamplesAnswer: ...
    def stop_run(self, run_id: str) -> str: ...
    def reconnect_now(self) -> None: ...
    def set_shown(self, shown: bool) -> None: ...
    def set_visible(self, visible: bool) -> None: ...
    def close(self) -> None: ...


def reason_of(error: BaseException) -> str:
    """One short line for the host panel: the error's own message without the host prefix."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(": ", 1)[1] if ": " in text and not text.startswith("[") else text


def indexed(g: Gpu, position: int) -> Gpu:
    """The GPU with an index to draw it by: its own, else its position in the sample."""
    return g if g.index is not None else replace(g, index=position)


class HostMonitor:
    """One host, one connection: the GPU stream supervises it (connect, backoff, reconnect); the run
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
        self._prices = Prices(spec)  # runs' cost so far, where the host has a rate
        self._copies, self._looks = copies or Copies(), Looks(spec)
        self.interval_s, self.runs_every_s = interval_s, runs_every_s
        self._opener = opener or open_transport
        self._transport: Transport | None = None
        self._up, self._closed, self._wake, self._lost = (threading.Event() for _ in range(4))
        self._restart, self._poll_now = threading.Event(), threading.Event()
        self._rates = (interval_s, runs_every_s)  # on screen; off screen: OFFSCREEN_*
        self._lock = threading.Lock()
        self._selected: str | None = None
        self._followers: list[Follower] = []
        self._records: dict[str, RunRecord] = {}
        self._no_gpu: str | None = None
        self._gpu_stream: GpuStream | None = None
        self._shown = threading.Event()
        self._shown.set()

    # ---------------------------------------------------------------------------------- connection
    def _connect(self) -> Transport:
        with self._lock:
            if self._transport is None:
                self._transport = self._opener(self.spec)
            t = self._transport
        t.home()  # forces the handshake now, so failures surface here and not in the streams
        return t

    def _live(self) -> Transport | None:
        """The transport when the host is up (the pollers never reconnect: the supervisor does)."""
        return self._transport if self._up.is_set() else None

    def lose(self, error: BaseException) -> None:
        """Any thread that sees the connection fail: close it, so every blocked read returns."""
        self._lost_reason = reason_of(error)
        self._up.clear()
        self._lost.set()
        self._hang_up()

    def _hang_up(self) -> None:
        """Close the connection and the GPU stream (LocalTransport has no connection to close)."""
        with self._lock:
            t, self._transport = self._transport, None
            stream, self._gpu_stream = self._gpu_stream, None
        if stream is not None:
            stream.close()  # from any thread: the streaming thread's loop just ends
        if t is not None:
            t.close()

    def _wait_retry(self, emit: Emit, reason: str, delay: float) -> None:
        end = time.monotonic() + delay
        while not self._closed.is_set() and (left := end - time.monotonic()) > 0:
            emit(LinkChanged(self.name, "down", reason, math.ceil(left)))
            if self._wake.wait(min(1.0, left)):
                break
        self._wake.clear()

    def stream_gpus(self, emit: Emit) -> None:
        attempt = 0
        while not self._closed.is_set():
            self._lost.clear()
            try:
                t = self._connect()
            except LOST as e:
                self.lose(e)
                self._wait_retry(emit, reason_of(e), retry_delay(attempt))
                attempt += 1
                continue
            attempt = 0
            self._up.set()
            emit(LinkChanged(self.name, "up"))
            try:
                self._gpu_samples(t, emit)
            except LOST as e:
                if not self._lost.is_set():
                    self.lose(e)
            if self._closed.is_set():
                return
            if self._restart.is_set() and not self._lost.is_set():
                self._restart.clear()  # the rate changed: the same connection, a new stream
                continue
            self._wait_retry(emit, getattr(self, "_lost_reason", "connection lost"), retry_delay(0))

    def _gpu_samples(self, t: Transport, emit: Emit) -> None:
        stream = GpuStream(t, self.interval_s)  # a host silent for its stall_s raises HostUnreachable
        with self._lock:
            self._gpu_stream = stream
        if self._lost.is_set() or self._closed.is_set():
            stream.close()  # hung up while the stream was being made
        got = False
        try:
            for gpus in stream.samples():
                got = True
                readings = tuple(indexed(g, i) for i, g in enumerate(gpus))
                emit(GpuSampled(self.name, readings, time.time()))
        except ToolMissing as e:
            self._no_gpu = f"no GPU ({reason_of(e).removeprefix('no NVIDIA GPU (').rstrip(')')})"
        if self._lost.is_set() or self._closed.is_set() or self._restart.is_set():
            return
        if not got:  # no GPU here: keep the connection; the pollers notice if it dies
            emit(GpuSampled(self.name, (), None, self._no_gpu or "no GPU (nvidia-smi gave no sample)"))
            self._lost.wait()

    # ------------------------------------------------------------------------------------- polling
    def poll(self, emit: Emit) -> None:
        agent: agent_client.Session | None = None  # one per connection: no new channel per poll
        while not self._closed.is_set():
            if not self._shown.wait(1.0):
                continue  # the run list is hidden (full-log view): nothing to poll for
            t = self._live()
            if t is None:
                self._up.wait(1.0)
                continue
            agent = agent if agent is not None and agent.transport is t else agent_client.Session(t)
            try:
                listing = self._prices.priced(list_runs(t, self.spec.remote_dir, agent=agent), t)
            except LOST as e:
                agent = None
                self.lose(e)
                continue
            except RemoteCommandFailed:
                listing = None  # no runs/ directory yet, or a broken run dir: show none, keep polling
            if listing is not None:
                listing = self._copies.flag(listing)
                self._records = {r.run_id: r for r in listing.runs}
                rows = tuple(run_row(r, listing.now) for r in reversed(listing.runs))
                emit(RunsListed(self.name, rows))
            try:
                self._looks.due(t, emit)  # the last doctor verdict, the armed stop (monitor.looks)
            except LOST as e:
                self.lose(e)
                continue
            self._poll_now.wait(self.runs_every_s)
            self._poll_now.clear()

    def select(self, run_id: str | None) -> None:
        """Follow ``run_id`` from now on; stop following the previous run (its stream closes)."""
        with self._lock:
            self._selected = run_id
            followers, self._followers = self._followers, []
        for f in followers:
            f.close()

    def _run_dir(self, run_id: str) -> RunDir:
        return RunDir(self.spec.remote_dir, validate_name("run", run_id))

    def follow(self, run_id: str, emit: Emit) -> None:
        """Stream the run's metrics.jsonl and output.log (two channels) until it is deselected."""
        parser, tail = MetricsParser(), LogTail()
        lock = threading.Lock()

        def on_chunk(which: str, chunk: bytes | None) -> None:
            with lock:
                if chunk is None:  # metrics.jsonl is about to be read again from byte 0
                    parser.restart()
                    return
                (parser if which == rd.METRICS else tail).feed(chunk)
                detail = parser.detail(self.name, run_id, tail.tail())
            emit(RunUpdated(detail))

        log = threading.Thread(target=self._follow_file, args=(run_id, rd.OUTPUT_LOG, on_chunk), daemon=True)
        log.start()
        self._follow_file(run_id, rd.METRICS, on_chunk)
        log.join()

    def _follow_file(self, run_id: str, name: str, on_chunk: Callable[[str, bytes | None], None]) -> None:
        offset = 0
        base = self._run_dir(run_id)
        while not self._closed.is_set() and self._selected == run_id:
            t = self._live()
            if t is None:
                self._up.wait(1.0)
                continue
            rec = self._records.get(run_id)
            f = Follower(t, base.file(name), offset, end_file=base.exit_code, redact=name == rd.OUTPUT_LOG,
                         session=rec.session if rec and rec.active else None)  # fmt: skip
            with self._lock:
                if self._selected != run_id:
                    return
                self._followers.append(f)
            try:
                for chunk in f.chunks():
                    on_chunk(name, chunk)
            except LOST as e:
                if self._selected == run_id and not self._lost.is_set():
                    self.lose(e)
            rec = self._records.get(run_id)
            if self._up.is_set() and self._selected == run_id and (rec is None or not rec.active):
                return  # the stream ended because the run did: everything has been read
            # Resume here after a reconnect. metrics.jsonl is read again from 0 instead: a resumed run
            # replaces it (docs/CONTRACTS.md), so a byte offset into it may point into another file;
            # the parser drops its partial line and rebuilds its curves from the first header.
            if name == rd.METRICS:
                on_chunk(name, None)
            else:
                offset = f.offset
            self._closed.wait(1.0)

    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None:
        """The whole output.log, then what is appended, while ``cancelled()`` is false (full-log view)."""
        t = self._live()
        if t is None:
            sink(b"(host unreachable)\n")
            return
        f = Follower(t, self._run_dir(run_id).output_log, 0, redact=True)

        def stop_when_cancelled() -> None:
            while not cancelled() and not self._closed.wait(0.2):
                pass
            f.close()

        threading.Thread(target=stop_when_cancelled, daemon=True).start()
        try:
            for chunk in f.chunks():
                sink(chunk)
        except LOST:
            sink(b"\n(connection lost)\n")

    def samples(self, run_id: str, request: SamplesRequest) -> SamplesAnswer:
        """What the model wrote in run ``run_id`` (``verbs.samples``: one request, read from the file's
        end on the host); raises HostUnreachable while the host is down."""
        t = self._live()
        if t is None:
            raise HostUnreachable(f"{self.name} is unreachable")
        req: SamplesRequest = {**request, "remote_dir": self.spec.remote_dir, "name": run_id}
        return verbs.samples(agent_client.Once(t), req)

    def stop_run(self, run_id: str) -> str:
        t = self._live()
        if t is None:
            return f"{self.name} is unreachable: run {run_id} not stopped"
        try:
            r = stop(self.spec, t, run_id)
        except PippaError as e:
            return str(e)
        state = r.after.state_text if r.after else "gone"
        return f"{self.name}: {run_id} {state}"

    def reconnect_now(self) -> None:
        self._wake.set()

    def set_shown(self, shown: bool) -> None:
        """Whether the run list is on screen; while it is not, it is not polled."""
        (self._shown.set if shown else self._shown.clear)()

    def set_visible(self, visible: bool) -> None:
        """On screen: the full rate; off screen: GPU every OFFSCREEN_GPU_S, runs every OFFSCREEN_RUNS_S.
        The GPU stream restarts at the new rate on the same connection; a host that comes into view
        is polled at once."""
        gpu_s, runs_s = self._rates if visible else (OFFSCREEN_GPU_S, OFFSCREEN_RUNS_S)
        if (gpu_s, runs_s) == (self.interval_s, self.runs_every_s):
            return
        self.interval_s, self.runs_every_s = gpu_s, runs_s
        with self._lock:
            stream = self._gpu_stream
        if stream is not None:
            self._restart.set()
            stream.close()
        if visible:
            self._poll_now.set()

    def close(self) -> None:
        self._poll_now.set()
        self._closed.set()
        self._wake.set()
        self._lost.set()
        self.select(None)
        self._hang_up()
