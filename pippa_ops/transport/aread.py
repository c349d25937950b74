"""Reading a command's stdout on an asyncio loop, without a thread per command.

A ``Process`` tells where to wait (``fileno``) and hands over what is already here (``read_nowait``);
the loop waits on the descriptor (``add_reader``) between reads. The dashboard reads every host's
GPU stream this way on Textual's own loop (``monitor.gpu_feed``).
"""

from __future__ import annotations

import asyncio
import time

from pippa_ops.transport.base import Process


async def readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` reads ready within ``timeout_s`` (False: the time ran out)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[bool] = loop.create_future()

    def done(value: bool) -> None:
        if not ready.done():
            ready.set_result(value)

    timer = loop.call_later(timeout_s, done, False)
    loop.add_reader(fd, done, True)
    try:
        return await ready
    finally:
        timer.cancel()
        loop.remove_reader(fd)


async def read(proc: Process, stall_s: float, n: int = 65536) -> bytes:
    """Up to ``n`` bytes of ``proc``'s stdout (``b""`` at its end); TimeoutError when nothing came for
    ``stall_s`` seconds. A process without a descriptor is read in the loop's executor."""
    while (got := proc.read_nowait(n)) is None:
        fd = proc.fileno()
        if fd is None:
            proc.set_deadline(time.monotonic() + stall_s)
            return await asyncio.get_running_loop().run_in_executor(None, proc.read, n)
        if not await readable(fd, stall_s):
            raise TimeoutError(f"no output for {stall_s:.0f}s")
    return got


class Lines:
    """``proc``'s stdout line by line (the newline kept; ``b""`` at the end), read on the loop."""

    def __init__(self, proc: Process, stall_s: float) -> None:
        self.proc, self.stall_s = proc, stall_s
        self._buf = bytearray()
        self._ended = False

    async def readline(self) -> bytes:
        while (end := self._buf.find(b"\n")) < 0 and not self._ended:
            chunk = await read(self.proc, self.stall_s)
            self._ended = not chunk
            self._buf += chunk
        cut = len(self._buf) if end < 0 else end + 1
        line = bytes(self._buf[:cut])
        del self._buf[:cut]
        return line
