"""The connection keeper: one process per user that holds authenticated SSH connections between commands.

Every pippa command used to pay a TCP + SSH handshake and authentication (4-6 round trips) before its
first byte of work; OpenSSH users avoid that with ControlMaster/ControlPersist. This is the same idea:
the first command starts the keeper (``keeper.client``), later commands reach it over a Unix socket
and run their commands on its connections (``keeper.pool``, asyncssh in ``transport.sshconn``), relayed
by ``keeper.relay``. Requests are typed (``keeper.ops``); ``Keeper.HANDLERS`` is the one table they
are dispatched by.

Everything runs on one asyncio loop: the accept loop, every client, every relay, and every host's
connection (asyncssh reads them all from the loop), so threads do not grow with hosts or commands.
Blocking work (parsing ~/.ssh/config, whose ``Match exec`` runs a command; name lookups) goes to a
pool of at most WORKERS threads, started on demand: a keeper with 64 hosts runs a handful of threads.
A connection unused for the persist time (``$PIPPA_PERSIST_S``, default 300 s) is closed; the keeper
exits once it has no connection and no client for that long, or when its socket is removed, or on
``pippa hosts --disconnect``.

Run as ``python -m pippa_ops.transport.keeper SOCKET``; hosts to connect to at once arrive as JSON
lines on stdin (the command that started it already went direct).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from pippa_contract.errors import ErrorKind
from pippa_ops import errors
from pippa_ops.transport.keeper import ops, wire
from pippa_ops.transport.keeper.pool import Pool
from pippa_ops.transport.keeper.relay import Relay, Tally, error_frame
from pippa_ops.transport.sshconfig import read_ssh_config, ssh_aliases, ssh_config_path

REQUEST_WAIT_S = 5.0  # a client that connects must send its request within this
WORKERS = 4  # threads for blocking work (~/.ssh/config, name lookups), started when needed

Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]


class Keeper:
    def __init__(self, listener: socket.socket, path: Path, persist_s: float) -> None:
        self.listener, self.path, self.persist_s = listener, path, persist_s
        self._inode = os.stat(path).st_ino
        self._unlinked = False
        self._clients = 0
        self._last = time.monotonic()
        self._stop: asyncio.Event | None = None
        self._config: tuple[tuple[int, int] | None, Any] = (None, None)
        self._lookups: tuple[Any, dict[str, Any]] = (None, {})  # a parsed config, its answers by name
        self.pool = Pool()
        self._relays = 0
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------------------------ serving
    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(WORKERS, thread_name_prefix="keeper-work"))
        self._stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, self.stop)
        server = await asyncio.start_unix_server(self._handle, sock=self.listener)
        self._spawn(self._prefetch_from_stdin())
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 1.0)
            if not self._stop.is_set():
                self._tick()
        server.close()
        self._unlink_files()
        self.pool.close_all()  # every relay ends, its client told the connection went
        deadline = time.monotonic() + 2.0  # answers in flight (a disconnect's) leave first
        while self._clients and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for task in list(self._tasks):
            task.cancel()

    def stop(self, *, now: bool = False) -> None:
        """End serving; ``now``: at once, the socket gone before the answer is sent (disconnect)."""
        if now:
            self._unlink()
        if self._stop is not None:
            self._stop.set()

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _unlink(self) -> None:
        """Remove our socket (not one a newer keeper bound meanwhile)."""
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
                self._unlinked = True
        except OSError:
            pass

    def _unlink_files(self) -> None:
        self._unlink()
        if self._unlinked:
            # Our own files go too (an empty log; a log with a traceback stays). A keeper starting
            # meanwhile on the old lock file is no second keeper for long: its socket is replaced by
            # the next one's, and a keeper whose socket was replaced exits (``_tick``).
            for suffix in (".lock", ".log"):
                extra = self.path.with_suffix(suffix)
                with contextlib.suppress(OSError):
                    if suffix == ".lock" or extra.stat().st_size == 0:
                        extra.unlink()

    def _tick(self) -> None:
        try:
            if os.stat(self.path).st_ino != self._inode:
                self.stop()  # our socket was removed or replaced: no client can reach us any more
                return
        except OSError:
            self.stop()
            return
        self.pool.close_idle(self.persist_s)
        if self.pool.empty() and self._clients == 0 and time.monotonic() - self._last > self.persist_s:
            self.stop()

    # ----------------------------------------------------------------------------------- requests
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients += 1
        try:
            if not wire.peer_is_me(writer.get_extra_info("socket")):
                return  # another user (or a peer we cannot identify): not a word
            frames = wire.FrameReader()
            got = await asyncio.wait_for(_next_frame(reader, frames), REQUEST_WAIT_S)
            if got is None or got[0] != wire.REQUEST:
                return
            writer.write(wire.frame(wire.ACK))
            request = ops.parse(wire.parse_json(got[1]))
            if isinstance(request, ops.Exec):
                await self._exec(reader, writer, frames, request)
                return
            try:
                answer = await self.HANDLERS[type(request)](self, request)
            except (errors.PippaError, TimeoutError) as e:
                writer.write(error_frame(errors.error_kind(e), str(e)))
            except Exception as e:  # a bug or a surprise from asyncssh: the client goes direct instead
                writer.write(error_frame(ErrorKind.INTERNAL, repr(e)))
            else:
                writer.write(wire.json_frame(wire.ANSWER, answer))
            await writer.drain()
        except (OSError, TimeoutError, wire.ProtocolError):
            pass
        finally:
            writer.close()
            self._clients -= 1
            self._last = time.monotonic()

    async def _ping(self, _: ops.Ping) -> dict[str, Any]:
        return {"pid": os.getpid()}

    async def _status(self, _: ops.Status) -> dict[str, Any]:
        return self.status()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "persist_s": self.persist_s,
            "hosts": self.pool.status(),
            "threads": threading.active_count(),
            "relays": self._relays,
        }

    async def _shutdown_op(self, _: ops.Shutdown) -> dict[str, Any]:
        closed = self.pool.connected()
        self.stop(now=True)
        return {"closed": closed}

    async def _ssh_config_op(self, request: ops.SshConfig) -> dict[str, Any]:
        config = await self._ssh_config()

        def answer() -> dict[str, Any]:
            lookups = {n: self._lookup(config, n) for n in ssh_aliases(config)}
            # A command's endpoint looks up the address of its host next: the address an alias
            # names, and those the command's inventory names (``addresses``), come in this answer.
            for address in [*(found["hostname"] for found in list(lookups.values())), *request.addresses]:
                if address not in lookups:
                    lookups[address] = self._lookup(config, address)
            return {"hostnames": sorted(config.get_hostnames()), "lookups": lookups}

        return await asyncio.get_running_loop().run_in_executor(None, answer)

    async def _ssh_lookup(self, request: ops.SshLookup) -> dict[str, Any]:
        config = await self._ssh_config()
        found = await asyncio.get_running_loop().run_in_executor(None, self._lookup, config, request.name)
        return {"lookup": found}

    def _lookup(self, config: Any, name: str) -> Any:
        """``config.lookup(name)``, once per name while the file is unchanged. Every command asks
        for every alias: a lookup matches the name against every Host block, so with 64 aliases a
        warm `pippa ps` cost the keeper 64 x 64 pattern matches (most of its CPU for that command).
        A ``Match exec`` condition is therefore run once per version of the file, not per command.
        (On a worker thread; a race computes one answer twice, the same answer.)"""
        of, cache = self._lookups
        if of is not config:  # a changed file was parsed again: its answers start afresh
            cache = {}
            self._lookups = (config, cache)
        found = cache.get(name)
        if found is None:
            found = cache[name] = config.lookup(name)
        return found

    async def _home(self, request: ops.Home) -> dict[str, Any]:
        kept = self.pool.acquire(request.endpoint, request.accept_new)
        try:
            return {"home": await self.pool.home(kept)}
        finally:
            self.pool.release(kept)

    HANDLERS: ClassVar[dict[type[ops.Op], Handler]] = {
        ops.Ping: _ping,
        ops.Status: _status,
        ops.Shutdown: _shutdown_op,
        ops.SshConfig: _ssh_config_op,
        ops.SshLookup: _ssh_lookup,
        ops.Home: _home,
    }  # ops.Exec: ``_exec``, which relays the command instead of answering

    async def _ssh_config(self) -> Any:
        """~/.ssh/config parsed again only when the file changed."""
        path = ssh_config_path()
        try:
            st = os.stat(path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        cached_stamp, config = self._config
        if config is None or cached_stamp != stamp:
            config = await asyncio.get_running_loop().run_in_executor(None, read_ssh_config)
            self._config = (stamp, config)
        return config

    # -------------------------------------------------------------------------------------- exec
    async def _exec(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frames: wire.FrameReader,
        request: ops.Exec,
    ) -> None:
        """Start the command and relay it until it ends (or its agent is lent back); or answer an error."""
        kept = self.pool.acquire(request.endpoint, request.accept_new)
        back = None
        try:
            try:
                chan, lent = await self.pool.start(kept, request.command, request.ahead)
            except errors.PippaError as e:
                writer.write(error_frame(errors.error_kind(e), str(e)))
                return
            except Exception as e:  # asyncssh's surprises: the client goes direct instead
                writer.write(error_frame(ErrorKind.INTERNAL, repr(e)))
                return
            tally = Tally(fresh=not lent) if request.ahead else None
            self._relays += 1
            try:
                if await Relay(reader, writer, frames, chan, first=b"+" if lent else b"", tally=tally).run():
                    back = chan
            finally:
                self._relays -= 1
                if request.ahead:  # however the relay ended: the pool counts its agents right
                    self.pool.returned(kept, request.command, back)
        finally:
            self.pool.release(kept)

    def prefetch(self, data: dict[str, Any]) -> None:
        with contextlib.suppress(wire.ProtocolError):
            ep = ops.endpoint_of(data)
            ahead = data.get("ahead")
            self._spawn(self.pool.prefetch(ep, ahead if isinstance(ahead, str) else None))

    async def _prefetch_from_stdin(self) -> None:
        """Hosts to connect to at once, as JSON lines on stdin (until it ends)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        except (OSError, ValueError):
            return  # stdin is not a pipe (a terminal, /dev/null): nothing to prefetch
        while line := await reader.readline():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                self.prefetch(data)


async def _next_frame(reader: asyncio.StreamReader, frames: wire.FrameReader) -> tuple[bytes, bytes] | None:
    while (got := frames.pop()) is None:
        data = await reader.read(wire.CHUNK)
        if not data:
            return None
        frames.feed(data)
    return got


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pippa_ops.transport.keeper SOCKET", file=sys.stderr)
        return 2
    path = Path(args[0])
    listener = wire.listen(path)
    if listener is None:
        return 0
    keeper = Keeper(listener, path, wire.persist_s())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    asyncio.run(keeper.serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
