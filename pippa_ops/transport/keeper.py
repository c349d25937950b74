"""The connection keeper: one process per user that holds authenticated SSH connections between commands.

Every pippa command used to pay a TCP + SSH handshake and authentication (4-6 round trips) before its
first byte of work; OpenSSH users avoid that with ControlMaster/ControlPersist. This is the same idea
for paramiko: the first command starts the keeper (``keeper_client``), later commands reach it over a
Unix socket and run their commands on its connections (``keeper_pool``), relayed by one loop
(``keeper_relay``). Requests are typed (``keeper_ops``); ``Keeper.HANDLERS`` is the one table they
are dispatched by.

Threads do not grow with hosts or commands beyond paramiko's own one per connection: this server's
accept loop, the relay loop, and up to WORKERS for blocking work (reading a request, connecting,
exec), which end when idle (``keeper_workers``): a keeper with nothing to do runs paramiko's
threads and two of its own.
A connection unused for the persist time (``$PIPPA_PERSIST_S``, default 300 s) is closed; the keeper
exits once it has no connection and no client for that long, or when its socket is removed, or on
``pippa hosts --disconnect``.

Run as ``python -m pippa_ops.transport.keeper SOCKET``; hosts to connect to at once arrive as JSON
lines on stdin (the command that started it already went direct).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pippa_contract.errors import ErrorKind
from pippa_ops import errors
from pippa_ops.transport import keeper_ops as ops
from pippa_ops.transport import keeper_wire as wire
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.keeper_pool import Pool
from pippa_ops.transport.keeper_relay import Relay, Relays, Tally, error_frame
from pippa_ops.transport.keeper_workers import Workers
from pippa_ops.transport.sshconfig import read_ssh_config, ssh_aliases, ssh_config_path

REQUEST_WAIT_S = 5.0  # a client that connects must send its request within this
WORKERS = 8  # threads for blocking work (connects, execs, requests being read)

Handler = Callable[[Any, Any], dict[str, Any]]


class Keeper:
    def __init__(self, listener: socket.socket, path: Path, persist_s: float) -> None:
        self.listener, self.path, self.persist_s = listener, path, persist_s
        self._inode = os.stat(path).st_ino
        self._unlinked = False
        self._lock = threading.Lock()
        self._clients = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._config: tuple[tuple[int, int] | None, Any] = (None, None)
        self._lookups: tuple[Any, dict[str, Any]] = (None, {})  # a parsed config, its answers by name
        self._workers = Workers(WORKERS)
        self.pool = Pool(self.submit)
        self.relays = Relays()

    def submit(self, work: Callable[[], None]) -> None:
        self._workers.submit(work)  # shutting down: nothing more starts

    # ------------------------------------------------------------------------------------ serving
    def serve(self) -> None:
        self.listener.settimeout(1.0)
        next_tick = time.monotonic() + 1.0
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                conn = None
            except OSError:
                if self._stop.is_set():
                    break
                raise
            if conn is not None:
                with self._lock:
                    self._clients += 1
                self.submit(lambda c=conn: self._handle(c))  # type: ignore[misc]
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + 1.0
                self._tick()
        self._shutdown()

    def stop(self, *, now: bool = False) -> None:
        """End serving; ``now``: at once, the socket gone before the answer is sent (disconnect)."""
        self._stop.set()
        if now:
            self._unlink()
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept

    def _unlink(self) -> None:
        """Remove our socket (not one a newer keeper bound meanwhile)."""
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
                self._unlinked = True
        except OSError:
            pass

    def wait_clients(self, timeout: float) -> None:
        """Give answers in flight (a disconnect's) the chance to leave before the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._clients == 0:
                    return
            time.sleep(0.02)

    def _client_left(self) -> None:
        with self._lock:
            self._clients -= 1
            self._last = time.monotonic()

    def _tick(self) -> None:
        try:
            if os.stat(self.path).st_ino != self._inode:
                self.stop()  # our socket was removed or replaced: no client can reach us any more
                return
        except OSError:
            self.stop()
            return
        self.pool.close_idle(self.persist_s)
        with self._lock:
            if self.pool.empty() and self._clients == 0 and time.monotonic() - self._last > self.persist_s:
                self.stop()

    def _shutdown(self) -> None:
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
        self.listener.close()
        self.relays.stop()
        self.pool.close_all()
        self._workers.shutdown()

    # ----------------------------------------------------------------------------------- requests
    def _handle(self, conn: socket.socket) -> None:
        relayed = False
        try:
            if not wire.peer_is_me(conn):
                return  # another user (or a peer we cannot identify): not a word
            reader = wire.FrameReader(conn)
            got = reader.next(time.monotonic() + REQUEST_WAIT_S)
            if got is None or got[0] != wire.REQUEST:
                return
            conn.sendall(wire.frame(wire.ACK))
            request = ops.parse(wire.parse_json(got[1]))
            if isinstance(request, ops.Exec):
                relayed = self._exec(conn, reader, request)
                return
            try:
                answer = self.HANDLERS[type(request)](self, request)
            except (errors.PippaError, TimeoutError) as e:
                conn.sendall(error_frame(errors.error_kind(e), str(e)))
                return
            except Exception as e:  # a bug or a surprise from paramiko: the client goes direct instead
                conn.sendall(error_frame(ErrorKind.INTERNAL, repr(e)))
                return
            conn.sendall(wire.json_frame(wire.ANSWER, answer))
        except (OSError, TimeoutError, wire.ProtocolError):
            pass
        finally:
            if not relayed:
                conn.close()
                self._client_left()

    def _ping(self, _: ops.Ping) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def _status(self, _: ops.Status) -> dict[str, Any]:
        return self.status()

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "persist_s": self.persist_s, "hosts": self.pool.status(),
                "threads": threading.active_count(), "relays": self.relays.count()}  # fmt: skip

    def _shutdown_op(self, _: ops.Shutdown) -> dict[str, Any]:
        closed = self.pool.connected()
        self.stop(now=True)
        return {"closed": closed}

    def _ssh_config_op(self, request: ops.SshConfig) -> dict[str, Any]:
        config = self._ssh_config()
        lookups = {n: self._lookup(config, n) for n in ssh_aliases(config)}
        # A command's endpoint looks up the address of its host next: the address an alias
        # names, and those the command's inventory names (``addresses``), come in this answer.
        for address in [*(found["hostname"] for found in list(lookups.values())), *request.addresses]:
            if address not in lookups:
                lookups[address] = self._lookup(config, address)
        return {"hostnames": sorted(config.get_hostnames()), "lookups": lookups}

    def _ssh_lookup(self, request: ops.SshLookup) -> dict[str, Any]:
        config = self._ssh_config()
        return {"lookup": self._lookup(config, request.name)}

    def _lookup(self, config: Any, name: str) -> Any:
        """``config.lookup(name)``, once per name while the file is unchanged. Every command asks
        for every alias: paramiko matches each name against every Host block, so with 64 aliases a
        warm `pippa ps` cost the keeper 64 x 64 pattern matches (most of its CPU for that command).
        A ``Match exec`` condition is therefore run once per version of the file, not per command."""
        of, cache = self._lookups
        if of is not config:  # a changed file was parsed again: its answers start afresh
            cache = {}
            self._lookups = (config, cache)
        found = cache.get(name)
        if found is None:
            found = cache[name] = config.lookup(name)
        return found

    def _home(self, request: ops.Home) -> dict[str, Any]:
        kept = self.pool.acquire(request.endpoint, request.accept_new)
        try:
            kept.connection()
            home = kept.transport.home()
            self.pool.refill(kept)
        finally:
            self.pool.release(kept)
        return {"home": home}

    HANDLERS: ClassVar[dict[type[ops.Op], Handler]] = {
        ops.Ping: _ping,
        ops.Status: _status,
        ops.Shutdown: _shutdown_op,
        ops.SshConfig: _ssh_config_op,
        ops.SshLookup: _ssh_lookup,
        ops.Home: _home,
    }  # ops.Exec: ``_exec``, which hands the connection to the relay loop instead of answering

    def _ssh_config(self) -> Any:
        """~/.ssh/config parsed again only when the file changed."""
        path = ssh_config_path()
        try:
            st = os.stat(path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        cached_stamp, config = self._config
        if config is None or cached_stamp != stamp:
            config = read_ssh_config()
            self._config = (stamp, config)
        return config

    # -------------------------------------------------------------------------------------- exec
    def _exec(self, conn: socket.socket, reader: wire.FrameReader, request: ops.Exec) -> bool:
        """Start the command and hand it to the relay loop (True); or answer an error (False)."""
        kept = self.pool.acquire(request.endpoint, request.accept_new)
        try:
            chan, lent = self.pool.start(kept, request.command, request.ahead)
        except errors.PippaError as e:
            self.pool.release(kept)
            with contextlib.suppress(OSError):
                conn.sendall(error_frame(errors.error_kind(e), str(e)))
            return False
        except Exception as e:  # paramiko's surprises: the client goes direct instead
            self.pool.release(kept)
            with contextlib.suppress(OSError):
                conn.sendall(error_frame(ErrorKind.INTERNAL, repr(e)))
            return False

        def done(back: paramiko.Channel | None) -> None:
            try:
                if request.ahead:
                    self.pool.returned(kept, request.command, back)
            finally:
                self.pool.release(kept)
                self._client_left()

        tally = Tally(fresh=not lent) if request.ahead else None
        self.relays.add(Relay(conn, reader, chan, done, first=b"+" if lent else b"", tally=tally))
        return True

    def prefetch(self, data: dict[str, Any]) -> None:
        with contextlib.suppress(wire.ProtocolError):
            ep = ops.endpoint_of(data)
            ahead = data.get("ahead")
            self.submit(lambda: self.pool.prefetch(ep, ahead if isinstance(ahead, str) else None))


def _prefetch_from_stdin(keeper: Keeper) -> None:
    for line in sys.stdin:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            keeper.prefetch(data)


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
    signal.signal(signal.SIGTERM, lambda *_: keeper.stop())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    threading.Thread(target=_prefetch_from_stdin, args=(keeper,), daemon=True).start()
    keeper.serve()
    keeper.wait_clients(2.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
