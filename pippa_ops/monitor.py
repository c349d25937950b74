"""Live state of hosts for the dashboard: typed state, the events that change it, and the per-host monitors.

This is core: it imports no textual, rich or typer, so the state model and the reducers are testable
without a terminal and the same monitors could drive another front end. The dashboard's thread
workers call the blocking ``HostMonitor`` methods and post the events they emit; the app folds each
event into its state with ``apply`` (a pure function), and widgets only draw that state.
"""

from __future__ import annotations

import json
import math
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import paramiko

from pippa_ops.connect import open_transport, ssh_argv
from pippa_ops.errors import (
    AuthFailed,
    HostKeyRejected,
    HostUnreachable,
    PippaError,
    RemoteCommandFailed,
    ToolMissing,
)
from pippa_ops.follow import Follower
from pippa_ops.gpu import Gpu, GpuStream
from pippa_ops.inventory import HostSpec
from pippa_ops.runs import stop
from pippa_ops.runs_list import RunRecord, list_runs
from pippa_ops.shell import validate_name
from pippa_ops.tmux import attach_argv as tmux_attach_argv
from pippa_ops.transport import Command, CommandResult, Process, Transport

HISTORY = 60  # samples kept per GPU for the sparklines (one minute at the default 1 s interval)
LOG_TAIL = 200  # lines of output.log kept for the run detail view
PLOTTED = ("reward/mean", "loss/total", "completions/mean_length", "grad/norm")

Link = Literal["connecting", "up", "down"]


# ----------------------------------------------------------------------------------------------- state
@dataclass(frozen=True)
class GpuReading:
    """One GPU in one nvidia-smi sample (None where the driver reports N/A)."""

    index: int
    name: str
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temp_c: float | None
    power_w: float | None
    uuid: str | None = None


@dataclass(frozen=True)
class GpuState:
    """A GPU as drawn: the latest reading plus short histories for the sparklines."""

    reading: GpuReading
    util_history: tuple[float, ...] = ()  # percent, oldest first
    mem_history: tuple[float, ...] = ()  # percent of total, oldest first


@dataclass(frozen=True)
class RunRow:
    """One run in a host's run list (live tmux session or finished run directory)."""

    run_id: str
    what: str  # recipe name, or the command for a plain-command run
    state: str  # running / completed / failed / stopped / killed / ...
    session: str | None = None
    step: int | None = None
    last_reward: float | None = None
    elapsed_s: float | None = None


@dataclass(frozen=True)
class HostState:
    """Everything the dashboard shows about one host."""

    name: str
    link: Link = "connecting"
    reason: str | None = None  # why the host is down, one line
    retry_in_s: float | None = None  # when down: seconds until the next attempt
    gpus: tuple[GpuState, ...] | None = None  # None: not known yet; (): the host has no GPU
    gpu_note: str | None = None  # e.g. "no GPU (nvidia-smi not found)"
    sample_time: float | None = None  # host-side timestamp of the latest GPU sample (unix s)
    runs: tuple[RunRow, ...] = ()


@dataclass(frozen=True)
class RunDetail:
    """The selected run: its curves, eval points, W&B link and the tail of its log."""

    host: str
    run_id: str
    series: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # key -> (step, value)
    evals: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # eval key -> points
    wandb_url: str | None = None
    end_status: str | None = None
    has_metrics: bool = False
    log_tail: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class LinkChanged:
    host: str
    link: Link
    reason: str | None = None
    retry_in_s: float | None = None


@dataclass(frozen=True)
class GpuSampled:
    host: str
    gpus: tuple[GpuReading, ...]  # () when the host has no GPU
    time: float | None = None  # the sample's timestamp on the host (unix s), when nvidia-smi gave one
    note: str | None = None


@dataclass(frozen=True)
class RunsListed:
    host: str
    runs: tuple[RunRow, ...]


@dataclass(frozen=True)
class RunUpdated:
    detail: RunDetail


HostEvent = LinkChanged | GpuSampled | RunsListed


def _push(history: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    if value is None:
        return history
    return (*history, value)[-HISTORY:]


def _mem_pct(r: GpuReading) -> float | None:
    if r.mem_used_mib is None or not r.mem_total_mib:
        return None
    return 100.0 * r.mem_used_mib / r.mem_total_mib


def apply(state: HostState, event: HostEvent) -> HostState:
    """Fold one event into a host's state (pure: the same inputs always draw the same screen)."""
    if isinstance(event, LinkChanged):
        return replace(state, link=event.link, reason=event.reason, retry_in_s=event.retry_in_s)
    if isinstance(event, GpuSampled):
        old = {g.reading.index: g for g in state.gpus or ()}
        gpus = []
        for r in event.gpus:
            prev = old.get(r.index, GpuState(r))
            gpus.append(
                GpuState(r, _push(prev.util_history, r.util_pct), _push(prev.mem_history, _mem_pct(r)))
            )
        return replace(
            state,
            link="up",
            reason=None,
            retry_in_s=None,
            gpus=tuple(gpus),
            gpu_note=event.note,
            sample_time=event.time,
        )
    return replace(state, runs=event.runs)


# ---------------------------------------------------------------------------------------- metrics file
class MetricsParser:
    """Accumulates metrics.jsonl as it is followed, chunk by chunk.

    A chunk may end inside a line (the writer flushes line by line, the reader reads bytes): the
    partial line waits in a buffer until its newline arrives, as docs/CONTRACTS.md asks.
    """

    def __init__(self) -> None:
        self._buf = b""
        self.series: dict[str, list[tuple[int, float]]] = {k: [] for k in PLOTTED}
        self.evals: dict[str, list[tuple[int, float]]] = {}
        self.wandb_url: str | None = None
        self.end_status: str | None = None
        self.last_step: int | None = None
        self.seen_any = False

    def feed(self, chunk: bytes) -> None:
        data = self._buf + chunk
        *lines, self._buf = data.split(b"\n")
        for raw in lines:
            self._line(raw)

    def _line(self, raw: bytes) -> None:
        try:
            rec = json.loads(raw)
        except ValueError:
            return  # a torn or foreign line never stops the dashboard
        if not isinstance(rec, dict):
            return
        self.seen_any = True
        kind = rec.get("type")
        step = rec.get("step")
        if kind == "header":
            wandb = rec.get("wandb")
            if isinstance(wandb, dict) and isinstance(wandb.get("url"), str):
                self.wandb_url = wandb["url"]
            if rec.get("resumed_from_step") is not None:
                self.end_status = None
        elif kind == "step" and isinstance(step, int):
            self.last_step = step
            for key in PLOTTED:
                v = rec.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.series[key].append((step, float(v)))
        elif kind == "eval" and isinstance(step, int):
            for key, v in rec.items():
                if "/" in key and isinstance(v, (int, float)) and not isinstance(v, bool):
                    if key.endswith(("/n", "/total_problems", "/problems_passed", "/eval_time")):
                        continue
                    self.evals.setdefault(key, []).append((step, float(v)))
        elif kind == "end":
            self.end_status = str(rec.get("status"))

    def last(self, key: str) -> float | None:
        points = self.series.get(key)
        return points[-1][1] if points else None

    def detail(self, host: str, run_id: str, log_tail: tuple[str, ...]) -> RunDetail:
        return RunDetail(
            host=host,
            run_id=run_id,
            series={k: tuple(v) for k, v in self.series.items()},
            evals={k: tuple(v) for k, v in self.evals.items()},
            wandb_url=self.wandb_url,
            end_status=self.end_status,
            has_metrics=self.seen_any,
            log_tail=log_tail,
        )


class LogTail:
    """The last ``LOG_TAIL`` lines of a followed log (bytes in, text lines out)."""

    def __init__(self, keep: int = LOG_TAIL) -> None:
        self._keep = keep
        self._buf = b""
        self.lines: list[str] = []

    def feed(self, chunk: bytes) -> None:
        data = self._buf + chunk
        *done, self._buf = data.split(b"\n")
        for raw in done:
            # A progress bar redraws with \r: only the last state of the line is worth showing.
            self.lines.append(raw.decode(errors="replace").rsplit("\r", 1)[-1])
        del self.lines[: -self._keep]

    def tail(self) -> tuple[str, ...]:
        partial = self._buf.decode(errors="replace").rsplit("\r", 1)[-1]
        return (*self.lines, partial) if partial else tuple(self.lines)


# ------------------------------------------------------------------------------------------- monitors
Emit = Callable[[HostEvent | RunUpdated], None]
Sink = Callable[[bytes], None]
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # waits between reconnect attempts; the last repeats
RUNS_EVERY_S = 3.0  # the run list is refreshed this often (after the previous poll finished)
LOST = (HostUnreachable, AuthFailed, HostKeyRejected, OSError, EOFError, TimeoutError, paramiko.SSHException)


class Monitor(Protocol):
    """What the dashboard needs from a host monitor; the loop methods block until ``close``."""

    name: str

    def stream_gpus(self, emit: Emit) -> None: ...
    def poll(self, emit: Emit) -> None: ...
    def follow(self, run_id: str, emit: Emit) -> None: ...
    def select(self, run_id: str | None) -> None: ...
    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None: ...
    def stop_run(self, run_id: str) -> str: ...
    def reconnect_now(self) -> None: ...
    def close(self) -> None: ...


def reason_of(error: BaseException) -> str:
    """One short line for the host panel: the error's own message without the host prefix."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(": ", 1)[1] if ": " in text and not text.startswith("[") else text


def gpu_reading(g: Gpu, fallback_index: int) -> GpuReading:
    return GpuReading(
        g.index if g.index is not None else fallback_index,
        g.name, g.util_pct, g.mem_used_mib, g.mem_total_mib, g.temp_c, g.power_w, g.uuid,
    )  # fmt: skip


def run_row(r: RunRecord, now: float) -> RunRow:
    elapsed = r.duration_s if r.duration_s is not None else (now - r.started if r.started else None)
    return RunRow(r.run_id, r.label, r.state_text, r.session, r.last_step, r.last_reward, elapsed)


class _Buffered(Process):
    """A stream read in blocks (not byte by byte) with a stall deadline: a silent host is a lost host."""

    def __init__(self, inner: Process, stall_s: float) -> None:
        self._inner, self._stall_s, self._buf = inner, stall_s, b""

    def read(self, n: int = 65536) -> bytes:
        if hasattr(self._inner, "set_deadline"):
            self._inner.set_deadline(time.monotonic() + self._stall_s)
        return self._inner.read(n)

    def readline(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = self.read()
            if not chunk:
                line, self._buf = self._buf, b""
                return line
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def close_stdin(self) -> None:
        self._inner.close_stdin()

    def wait(self, timeout: float | None = None) -> int:
        return self._inner.wait(timeout)

    def stderr_text(self) -> str:
        return self._inner.stderr_text()

    def kill(self) -> None:
        self._inner.kill()


class _StreamTransport(Transport):
    """The host's transport, but ``start`` hands back ``_Buffered`` processes (for GpuStream)."""

    def __init__(self, inner: Transport, stall_s: float) -> None:
        self.name, self._inner, self._stall_s = inner.name, inner, stall_s

    def run(self, command: Command, **kw: Any) -> CommandResult:
        return self._inner.run(command, **kw)

    def start(self, command: Command) -> Process:
        return _Buffered(self._inner.start(command), self._stall_s)

    def home(self) -> str:
        return self._inner.home()

    def close(self) -> None:
        self._inner.close()


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
    ) -> None:
        self.name, self.spec = spec.name, spec
        self.interval_s, self.runs_every_s = interval_s, runs_every_s
        self._opener = opener or open_transport
        self._transport: Transport | None = None
        self._up, self._closed, self._wake, self._lost = (threading.Event() for _ in range(4))
        self._lock = threading.Lock()
        self._selected: str | None = None
        self._followers: list[Follower] = []
        self._records: dict[str, RunRecord] = {}
        self._no_gpu: str | None = None

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
        with self._lock:
            t, self._transport = self._transport, None
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
                self._wait_retry(emit, reason_of(e), BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
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
            self._wait_retry(emit, getattr(self, "_lost_reason", "connection lost"), BACKOFF_S[0])

    def _gpu_samples(self, t: Transport, emit: Emit) -> None:
        stall = max(10.0, 5 * self.interval_s)
        stream = GpuStream(_StreamTransport(t, stall), self.interval_s)
        got = False
        try:
            for gpus in stream.samples():
                got = True
                readings = tuple(gpu_reading(g, i) for i, g in enumerate(gpus))
                emit(GpuSampled(self.name, readings, time.time()))
        except ToolMissing as e:
            self._no_gpu = f"no GPU ({reason_of(e).removeprefix('no NVIDIA GPU (').rstrip(')')})"
        except TimeoutError as e:
            raise HostUnreachable(f"{self.name}: no answer for {stall:.0f}s") from e
        if self._lost.is_set() or self._closed.is_set():
            return
        if not got:  # no GPU here: keep the connection; the pollers notice if it dies
            emit(GpuSampled(self.name, (), None, self._no_gpu or "no GPU (nvidia-smi gave no sample)"))
            self._lost.wait()

    # ------------------------------------------------------------------------------------- polling
    def poll(self, emit: Emit) -> None:
        while not self._closed.is_set():
            t = self._live()
            if t is None:
                self._up.wait(1.0)
                continue
            try:
                listing = list_runs(t, self.spec.remote_dir)
            except LOST as e:
                self.lose(e)
                continue
            except RemoteCommandFailed:
                listing = None  # no runs/ directory yet, or a broken run dir: show none, keep polling
            if listing is not None:
                self._records = {r.run_id: r for r in listing.runs}
                rows = tuple(run_row(r, listing.now) for r in reversed(listing.runs))
                emit(RunsListed(self.name, rows))
            self._closed.wait(self.runs_every_s)

    def select(self, run_id: str | None) -> None:
        """Follow ``run_id`` from now on; stop following the previous run (its stream closes)."""
        with self._lock:
            self._selected = run_id
            followers, self._followers = self._followers, []
        for f in followers:
            f.close()

    def _run_dir(self, run_id: str) -> str:
        return f"{self.spec.remote_dir.rstrip('/')}/runs/{validate_name('run', run_id)}"

    def follow(self, run_id: str, emit: Emit) -> None:
        """Stream the run's metrics.jsonl and output.log (two channels) until it is deselected."""
        parser, tail = MetricsParser(), LogTail()
        lock = threading.Lock()

        def on_chunk(which: str, chunk: bytes) -> None:
            with lock:
                (parser if which == "metrics.jsonl" else tail).feed(chunk)
                detail = parser.detail(self.name, run_id, tail.tail())
            emit(RunUpdated(detail))

        log = threading.Thread(target=self._follow_file, args=(run_id, "output.log", on_chunk), daemon=True)
        log.start()
        self._follow_file(run_id, "metrics.jsonl", on_chunk)
        log.join()

    def _follow_file(self, run_id: str, name: str, on_chunk: Callable[[str, bytes], None]) -> None:
        offset = 0
        base = self._run_dir(run_id)
        while not self._closed.is_set() and self._selected == run_id:
            t = self._live()
            if t is None:
                self._up.wait(1.0)
                continue
            rec = self._records.get(run_id)
            f = Follower(t, f"{base}/{name}", offset, end_file=f"{base}/exit_code",
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
            offset = f.offset  # resume here after a reconnect
            rec = self._records.get(run_id)
            if self._up.is_set() and self._selected == run_id and (rec is None or not rec.active):
                return  # the stream ended because the run did: everything has been read
            self._closed.wait(1.0)

    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None:
        """The whole output.log, then what is appended, while ``cancelled()`` is false (full-log view)."""
        t = self._live()
        if t is None:
            sink(b"(host unreachable)\n")
            return
        f = Follower(t, f"{self._run_dir(run_id)}/output.log", 0)

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

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._lost.set()
        self.select(None)
        with self._lock:
            t, self._transport = self._transport, None
        if t is not None:
            t.close()


def attach_argv(spec: HostSpec, session: str) -> list[str]:
    """The same attach as ``pippa attach``: tmux attach, over ``ssh -t`` unless the host is local."""
    argv = tmux_attach_argv(session)
    return argv if spec.is_local else [*ssh_argv(spec), shlex.join(argv)]
