"""A command's own SSH connection (``--no-reuse``, the fallback without a keeper, ``pippa forward``):
the keeper's asyncssh connection (``sshconn.HostConn``), driven from this process's threads.

Why the same code as the keeper: one connect, one cipher list, one host-key policy and one map of
failures to one-line errors, whichever path a command takes. asyncssh runs on an asyncio loop; a
command's threads (sync, fan-out, the dashboard's workers) are not on one, so every connection of
the process lives on one loop thread (``LoopThread``), and ``SSHTransport`` and ``SSHProcess`` hand
their calls to it. One TCP+SSH handshake per host serves every channel of the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pippa_ops.transport.base import CONNECT_TIMEOUT_S, Command, Process, Transport, as_shell_line
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.sshconn import Chan, Conn, HostConn

T = TypeVar("T")
HIGH_WATER = 4 << 20  # unread stdout held here before the channel stops reading (the window then fills)
KILL_TRIES, KILL_WAIT_S = 5, 0.2  # right after exec the session's process group may not exist yet


class LoopThread:
    """An asyncio loop in one daemon thread, and the calls that hand work to it from other threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        threading.Thread(target=self.loop.run_forever, name="pippa-ssh", daemon=True).start()

    def run(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the loop and wait for its result (its own timeouts bound the wait)."""
        return asyncio.run_coroutine_threadsafe(_awaited(coro), self.loop).result()

    def call(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the loop soon, without waiting."""
        self.loop.call_soon_threadsafe(fn)


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """This process's SSH loop, started on first use (again in a forked child: threads do not fork).
    One per process, like asyncio's own running loop: its connections' readers are one thread, not
    one per host."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = LoopThread()
        return _shared


class SSHTransport(Transport):
    """Commands on one host over one lazily opened, shared, keepalive'd asyncssh connection; where to
    connect (address, user, keys, ProxyJump hops) is the ``Endpoint`` that ``hosts.endpoint`` resolved."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        accept_new: bool = False,
        timeout: float = CONNECT_TIMEOUT_S,
        loop: LoopThread | None = None,
    ) -> None:
        self.name = endpoint.name
        self.endpoint = endpoint
        self.loop = loop or shared_loop()
        self.conn = HostConn(endpoint, accept_new, timeout)
        self._timeout = timeout
        self._home: str | None = None

    def connection(self) -> Conn:
        """The live connection, connecting on first use (one connect at a time, from any thread)."""
        return self.loop.run(self.conn.connection())

    def start(self, command: Command) -> SSHProcess:
        line = as_shell_line(command)

        async def started() -> SSHProcess:
            return SSHProcess(await self.conn.exec(line), self)  # made on the loop: no byte missed

        return self.loop.run(started())

    def home(self) -> str:
        if self._home is None:
            r = self.run('printf %s "$HOME"', timeout=self._timeout * 3, check=True)
            self._home = r.stdout.strip()
        return self._home

    def close(self) -> None:
        async def closed() -> None:
            self.conn.close()

        self.loop.run(closed())


class SSHProcess(Process):
    """A command on a channel: its stdout and stderr collected on the loop, read here from any thread;
    past HIGH_WATER unread bytes the channel stops reading, so a slow reader holds the sender back."""

    def __init__(self, chan: Chan, transport: SSHTransport) -> None:
        super().__init__()
        self._chan, self._t, self._loop = chan, transport, transport.loop
        self._cond = threading.Condition()
        self._buf = bytearray(chan.held)
        self._paused = False
        self._wake: tuple[int, int] | None = None  # (read, write) ends of ``fileno``'s pipe, once asked
        chan.held.clear()
        chan.sink = self._received
        chan.on_change = self._notify

    # on the loop
    def _received(self, data: bytes) -> None:
        with self._cond:
            self._buf += data
            if len(self._buf) > HIGH_WATER and not self._paused and self._chan.channel is not None:
                self._paused = True
                self._chan.channel.pause_reading()
            self._cond.notify_all()
            self._poke()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
            self._poke()

    def _resume(self) -> None:
        if self._chan.channel is not None and not self._chan.closed:
            self._chan.channel.resume_reading()

    # from the command's threads
    def _read_raw(self, n: int) -> bytes:
        with self._cond:
            # the end of stdout is its EOF (or the channel's close), not the exit status: that may come
            # while output the channel holds back (paused above) is still to be read
            while not self._buf and not (self._chan.eof or self._chan.closed):
                self._cond.wait(self._time_left())  # past the deadline, _time_left raises TimeoutError
            out = bytes(self._buf[:n])
            del self._buf[:n]
            if self._paused and len(self._buf) < HIGH_WATER // 2:
                self._paused = False
                self._loop.call(self._resume)
            return out

    def fileno(self) -> int | None:
        """A pipe this process's loop thread writes a byte to whenever stdout grows or ends (made on the
        first ask), so another event loop can wait for output without a thread blocked in a read."""
        with self._cond:
            if self._wake is None:
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                self._wake = (r, w)
                self._poke()  # what came before the pipe existed
            return self._wake[0]

    def _poke(self) -> None:
        """Under ``_cond``: wake a loop waiting on ``fileno`` (a full pipe is awake already)."""
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")

    def _read_nowait_raw(self, n: int) -> bytes | None:
        with self._cond:
            if self._wake is not None:
                with contextlib.suppress(OSError):
                    os.read(self._wake[0], 4096)
            if not self._buf and not (self._chan.eof or self._chan.closed):
                return None
        return self._read_raw(n)  # returns at once: bytes are here, or the stream ended

    def _drop_wake(self) -> None:
        with self._cond:
            fds, self._wake = self._wake, None
        for fd in fds or ():
            os.close(fd)

    def write(self, data: bytes) -> None:
        async def sent() -> None:
            if self._chan.closed:
                raise OSError("the channel is closed")
            self._chan.write(data)
            await self._chan.writable.wait()

        self._loop.run(sent())

    def close_stdin(self) -> None:
        self._loop.call(self._chan.write_eof)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._chan.status is None and not self._chan.closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("command still running")
                self._cond.wait(left)
        return -1 if self._chan.status is None else self._chan.status

    def stderr_text(self) -> str:
        return bytes(self._chan.err).decode(errors="replace")

    def connection_lost(self) -> bool:
        return self._chan.status is None and (self._chan.lost or not self._t.conn.alive())

    def kill(self) -> None:
        """Ask sshd to KILL the command (OpenSSH >= 7.9 honours the signal request), then close."""
        for _ in range(KILL_TRIES):
            if self._chan.closed or self._chan.status is not None:
                break
            if not self._loop.run(_signalled(self._chan, "KILL")):
                break
            with self._cond:
                self._cond.wait_for(lambda: self._chan.closed or self._chan.status is not None, KILL_WAIT_S)
        self.close()

    def close(self) -> None:
        self._loop.call(self._chan.close)
        self._drop_wake()


async def _signalled(chan: Chan, name: str) -> bool:
    return chan.signal(name)
