"""One host's connection as the dashboard's monitor keeps it: opened, up, lost, closed.

Everything here runs on the event loop (Textual's), except ``lose``, which a follower thread may call:
it hops onto the loop. The GPU feed (``monitor.gpu_feed``) supervises the link (connects, backs off,
reconnects); the run poll and the followers only use it while it is up. Blocking calls (opening the
transport, its handshake) go to the loop's executor: one bounded pool for the whole dashboard.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pippa_ops.errors import AuthFailed, HostKeyRejected, HostUnreachable
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.monitor.state import HostEvent, LinkChanged, RunUpdated
from pippa_ops.transport.base import Transport

T = TypeVar("T")
Emit = Callable[[HostEvent | RunUpdated], None]
LOST = (HostUnreachable, AuthFailed, HostKeyRejected, OSError, EOFError, TimeoutError)


def reason_of(error: BaseException) -> str:
    """One short line for the host panel: the error's own message without the host prefix."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(": ", 1)[1] if ": " in text and not text.startswith("[") else text


async def blocking(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in the loop's executor (the dashboard sizes it once for every host)."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    """Whether ``event`` is set within ``timeout_s``."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Link:
    """The host's one transport and whether it is up. ``closed`` is a thread event: followers wait on it."""

    def __init__(self, spec: HostSpec, opener: Callable[[HostSpec], Transport]) -> None:
        self.name, self.spec = spec.name, spec
        self._opener = opener
        self.transport: Transport | None = None
        self.closed = threading.Event()
        self.up, self.lost, self.wake = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.lost_reason = "connection lost"
        self.on_lost: Callable[[], None] = lambda: None  # the GPU feed stops reading its stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def bind(self) -> None:
        """Remember the loop the monitor runs on (the first coroutine to start calls it)."""
        self._loop = asyncio.get_running_loop()

    def on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the monitor's loop: now when called there, else as soon as the loop can."""
        loop = self._loop
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here or loop is None:
            fn()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn)

    def live(self) -> Transport | None:
        """The transport while the host is up (the pollers never reconnect: the feed does)."""
        return self.transport if self.up.is_set() else None

    async def connect(self) -> Transport:
        """The transport, opened and its handshake done (so failures surface here, not in the streams)."""
        self.lost.clear()
        t = await blocking(self._open)
        await blocking(t.home)
        return t

    def _open(self) -> Transport:
        with self._lock:
            if self.transport is None:
                self.transport = self._opener(self.spec)
            return self.transport

    def set_up(self) -> None:
        self.up.set()

    def lose(self, error: BaseException) -> None:
        """From any thread: the connection failed; the feed hangs up and reconnects."""
        reason = reason_of(error)
        self.on_loop(lambda: self._lose(reason))

    def _lose(self, reason: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.up.clear()
        self.lost.set()
        self.on_lost()

    def hang_up(self) -> None:
        """Close the transport: every command still reading on it (a follower, a poll) ends."""
        with self._lock:
            t, self.transport = self.transport, None
        if t is not None:
            t.close()

    async def wait_retry(self, emit: Emit, reason: str, delay: float) -> None:
        """Show the host down with a countdown until ``delay`` passes or ``r`` asks to reconnect now."""
        end = time.monotonic() + delay
        while not self.closed.is_set() and (left := end - time.monotonic()) > 0:
            emit(LinkChanged(self.name, "down", reason, math.ceil(left)))
            if await wait_for(self.wake, min(1.0, left)):
                break
        self.wake.clear()

    def close(self) -> None:
        """Any thread: the monitor ends; its coroutines return and the transport closes."""
        self.closed.set()

        def stop() -> None:
            self.wake.set()
            self._lose("closed")
            self.lost.set()

        self.on_loop(stop)
