"""A host's GPU stream as one asyncio task: nvidia-smi's own loop on one channel, read on the event loop.

The feed supervises the host's link (``monitor.link``): it connects, backs off and reconnects; the
run poll and the followers wait for it. Its samples are read through the process's descriptor
(``transport.aread``), so 64 hosts cost 64 registered descriptors, not 64 threads; starting the
command and ending it are blocking calls and go to the loop's executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace

from pippa_ops.errors import HostUnreachable
from pippa_ops.gpu import STREAM_FIELDS, Gpu, Samples, query_argv
from pippa_ops.monitor.link import LOST, Emit, Link, blocking, reason_of
from pippa_ops.monitor.state import GpuSampled, LinkChanged
from pippa_ops.transport import aread
from pippa_ops.transport.base import Process, Transport
from pippa_ops.transport.retry import retry_delay
from pippa_ops.transport.shell import join


def indexed(g: Gpu, position: int) -> Gpu:
    """The GPU with an index to draw it by: its own, else its position in the sample."""
    return g if g.index is not None else replace(g, index=position)


class GpuFeed:
    """The GPU samples of one host at ``interval_s``; ``restart`` applies a new interval on the same link."""

    def __init__(self, link: Link, interval_s: float) -> None:
        self.link, self.interval_s = link, interval_s
        self._reading: asyncio.Task[bool] | None = None
        self._restart = False
        self._no_gpu: str | None = None
        link.on_lost = self._stop_reading

    @property
    def stall_s(self) -> float:
        """A host silent this long is lost (a hung link), as ``gpu.GpuStream`` has it."""
        return max(10.0, 5 * self.interval_s)

    def restart(self, interval_s: float) -> None:
        """The same connection, a new stream at ``interval_s`` (the host came into or out of view)."""
        self.interval_s = interval_s
        if self._reading is not None and not self._reading.done():
            self._restart = True
            self._reading.cancel()

    def _stop_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()

    async def run(self, emit: Emit) -> None:
        """Until the link closes: connect, stream, and after a loss show the host down and retry."""
        self.link.bind()
        try:
            await self._supervise(emit)
        finally:
            self.link.hang_up()

    async def _supervise(self, emit: Emit) -> None:
        link = self.link
        attempt = 0
        while not link.closed.is_set():
            try:
                t = await link.connect()
            except LOST as e:
                link.lose(e)
                link.hang_up()
                await link.wait_retry(emit, reason_of(e), retry_delay(attempt))
                attempt += 1
                continue
            if link.closed.is_set():
                return
            attempt = 0
            link.set_up()
            emit(LinkChanged(link.name, "up"))
            try:
                await self._stream(t, emit)
            except LOST as e:
                link.lose(e)
            if link.closed.is_set():
                return
            if self._restart and not link.lost.is_set():
                self._restart = False
                continue
            if link.lost.is_set():
                link.hang_up()  # every read still blocked on it (a follower, a poll) ends now
            await link.wait_retry(emit, link.lost_reason, retry_delay(0))

    async def _stream(self, t: Transport, emit: Emit) -> None:
        proc = await blocking(t.start, join(query_argv(self.interval_s, STREAM_FIELDS)))
        self._reading = asyncio.ensure_future(self._samples(proc, t.name, emit))
        if self.link.lost.is_set() or self.link.closed.is_set():
            self._reading.cancel()  # lost while the stream was being started
        try:
            await asyncio.wait({self._reading})
        finally:
            reading, self._reading = self._reading, None
            if not reading.done():  # this task itself was cancelled
                reading.cancel()
                await asyncio.wait({reading})
            self._end(proc)
        if reading.cancelled():
            return
        got = reading.result()
        if not got and not self.link.lost.is_set():  # no GPU here: keep the link; the pollers notice a loss
            emit(GpuSampled(t.name, (), None, self._no_gpu or "no GPU (nvidia-smi gave no sample)"))
            await self.link.lost.wait()

    async def _samples(self, proc: Process, host: str, emit: Emit) -> bool:
        """Emit each sample until the stream ends; whether any came. Raises HostUnreachable when the
        host is silent for ``stall_s``, ToolMissing when it has no nvidia-smi."""
        lines = aread.Lines(proc, self.stall_s)
        samples = Samples()
        got = False
        while True:
            try:
                line = await lines.readline()
            except TimeoutError as e:
                raise HostUnreachable(f"{host}: no answer for {self.stall_s:.0f}s") from e
            if not line:
                break
            if (sample := samples.add(line)) is not None:
                got = True
                readings = tuple(indexed(g, i) for i, g in enumerate(sample))
                emit(GpuSampled(host, readings, time.time()))
        code = await blocking(proc.wait, 10)
        if code == 127:  # gpu.GpuStream raises ToolMissing here; the panel says it in a line
            self._no_gpu = "no GPU (nvidia-smi not found)"
        return got

    def _end(self, proc: Process) -> None:
        """Stop nvidia-smi on the host without blocking the loop (a relayed kill waits for the end)."""
        try:
            asyncio.get_running_loop().run_in_executor(None, _kill, proc)
        except RuntimeError:  # the executor is shut down: the app is closing
            proc.close()


def _kill(proc: Process) -> None:
    with contextlib.suppress(*LOST):
        proc.kill()
