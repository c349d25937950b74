"""The connection keeper: one process per user that holds authenticated SSH connections between commands.

Every pippa command used to pay a TCP + SSH handshake and authentication (4-6 round trips) before its
first byte of work; OpenSSH users avoid that with ControlMaster/ControlPersist. This is the same idea
for paramiko: the first command starts the keeper (``keeper_client``), later commands reach it over a
Unix socket and run their commands on its connections. A paramiko channel cannot be handed to another
process, so the keeper relays: per command one Unix-socket connection, spliced to one SSH channel
(stdin, stdout, stderr, exit status, kill; framing in ``keeper_wire``).

The connections are ``SSHTransport``s, so the host-key policy (known_hosts, never added silently
without --accept-new, a changed key always refused on every reconnect), identities and ProxyJump are
exactly those of a direct connection. One session channel per host is kept open ahead of time, so a
warm command costs one round trip (exec) before its own traffic; and two host agents (the command
every pippa verb starts, ``agent_client.command``, which waits for its first request on stdin) are
started ahead, so a warm agent request costs one round trip in all. A connection unused for the persist
time (``$PIPPA_PERSIST_S``, default 300 s) is closed; the keeper exits once it has no connection and
no client for that long, or when its socket is removed, or on ``pippa hosts --disconnect``.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pippa_contract.errors import ErrorKind
from pippa_ops import errors
from pippa_ops.transport import keeper_wire as wire
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.base import CONNECT_TIMEOUT_S
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.ssh import SSHProcess, SSHTransport
from pippa_ops.transport.sshconfig import read_ssh_config, ssh_aliases, ssh_config_path

REQUEST_WAIT_S = 5.0  # a client that connects must send its request within this
AHEAD = 2  # host agents kept started per host (an idle python3 each, waiting on its stdin)


def _error_frame(kind: ErrorKind, message: str) -> bytes:
    """An error answer: the client raises the error of ``kind`` (``internal``: it goes direct)."""
    return wire.json_frame(wire.ERROR, {"error": kind.value, "message": message})


@dataclass
class Kept:
    """One host's connection, its spare channel, and what the persist timer needs."""

    transport: SSHTransport
    lock: threading.Lock = field(default_factory=threading.Lock)
    spare: paramiko.Channel | None = None
    ready: list[tuple[str, paramiko.Channel]] = field(default_factory=list)  # agents started ahead
    starting: int = 0  # agents being started ahead now
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)
    connections: list[int] = field(default_factory=list)  # ids of the paramiko Transports seen
    commands: int = 0
    ahead_used: int = 0  # commands that got an agent started ahead

    def connection(self) -> paramiko.Transport:
        t = self.transport.connection()
        with self.lock:
            if not self.connections or self.connections[-1] != id(t):
                self.connections.append(id(t))
        return t

    def close(self) -> None:
        with self.lock:
            spare, self.spare = self.spare, None
            ready, self.ready = self.ready, []
        for chan in [spare, *(c for _, c in ready)]:
            if chan is not None:
                chan.close()
        self.transport.close()


def endpoint_of(data: Any) -> Endpoint:
    """The endpoint the command resolved (``Endpoint.as_json``): the keeper connects where it says."""
    try:
        return Endpoint.from_json(data)
    except ValueError as e:
        raise wire.ProtocolError("bad host") from e


class Keeper:
    def __init__(self, listener: socket.socket, path: Path, persist_s: float) -> None:
        self.listener, self.path, self.persist_s = listener, path, persist_s
        self._inode = os.stat(path).st_ino
        self._unlinked = False
        self._lock = threading.Lock()
        self._kept: dict[str, Kept] = {}
        self._clients = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._config: tuple[tuple[int, int] | None, Any] = (None, None)

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
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
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

    def _tick(self) -> None:
        try:
            if os.stat(self.path).st_ino != self._inode:
                self.stop()  # our socket was removed or replaced: no client can reach us any more
                return
        except OSError:
            self.stop()
            return
        now = time.monotonic()
        with self._lock:
            idle = [k for k, v in self._kept.items() if v.busy == 0 and now - v.last_used > self.persist_s]
            gone = [self._kept.pop(k) for k in idle]
            if not self._kept and self._clients == 0 and now - self._last > self.persist_s:
                self.stop()
        for kept in gone:
            kept.close()

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
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for k in kept:
            k.close()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if not wire.peer_is_me(conn):
                return  # another user (or a peer we cannot identify): not a word
            reader = wire.FrameReader(conn)
            got = reader.next(time.monotonic() + REQUEST_WAIT_S)
            if got is None or got[0] != wire.REQUEST:
                return
            request = wire.parse_json(got[1])
            conn.sendall(wire.frame(wire.ACK))
            self._dispatch(conn, reader, request)
        except (OSError, TimeoutError, wire.ProtocolError):
            pass
        finally:
            conn.close()
            with self._lock:
                self._clients -= 1
                self._last = time.monotonic()

    def _dispatch(self, conn: socket.socket, reader: wire.FrameReader, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "exec":
            self._exec(conn, reader, request)
            return
        try:
            answer = self._answer(op, request)
        except (errors.PippaError, TimeoutError) as e:
            conn.sendall(_error_frame(errors.error_kind(e), str(e)))
            return
        except Exception as e:  # a bug or a surprise from paramiko: the client goes direct instead
            conn.sendall(_error_frame(ErrorKind.INTERNAL, repr(e)))
            return
        conn.sendall(wire.json_frame(wire.ANSWER, answer))

    def _answer(self, op: object, request: dict[str, Any]) -> dict[str, Any]:
        if op == "ping":
            return {"pid": os.getpid()}
        if op == "ssh_config":
            config = self._ssh_config()
            lookups = {n: config.lookup(n) for n in ssh_aliases(config)}
            # A command's endpoint looks up the address of its host next: the address an alias
            # names, and those the command's inventory names (``addresses``), come in this answer.
            asked = request.get("addresses")
            more = [str(a) for a in asked] if isinstance(asked, list) else []
            for address in [*(found["hostname"] for found in list(lookups.values())), *more]:
                if address not in lookups:
                    lookups[address] = config.lookup(address)
            return {"hostnames": sorted(config.get_hostnames()), "lookups": lookups}
        if op == "ssh_lookup":
            return {"lookup": self._ssh_config().lookup(str(request["name"]))}
        if op == "home":
            kept = self._kept_for(request)
            try:
                kept.connection()
                home = kept.transport.home()
                self._refill(kept)
            finally:
                self._release(kept)
            return {"home": home}
        if op == "status":
            return self.status()
        if op == "shutdown":
            with self._lock:
                closed = sum(1 for k in self._kept.values() if k.connections)
            self.stop(now=True)
            return {"closed": closed}
        raise wire.ProtocolError(f"unknown op {op!r}")

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            hosts = [
                {
                    "key": key,
                    "name": k.transport.name,
                    "connections": len(k.connections),
                    "commands": k.commands,
                    "ahead_used": k.ahead_used,
                    "busy": k.busy,
                    "idle_s": round(now - k.last_used, 3),
                }
                for key, k in self._kept.items()
            ]
        return {"pid": os.getpid(), "persist_s": self.persist_s, "hosts": hosts}

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

    # ---------------------------------------------------------------------------------- connections
    def _kept_for(self, request: dict[str, Any]) -> Kept:
        """The host's entry, marked busy (``_release`` when done); created on first use."""
        ep = endpoint_of(request.get("host"))
        accept_new = bool(request.get("accept_new"))
        key = json.dumps([ep.as_json(), accept_new])
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = Kept(SSHTransport(ep, accept_new=accept_new))
            kept.busy += 1
            kept.last_used = time.monotonic()
        return kept

    def _release(self, kept: Kept) -> None:
        with self._lock:
            kept.busy -= 1
            kept.last_used = time.monotonic()

    def prefetch(self, data: dict[str, Any]) -> None:
        """Connect to a host now (and open its spare channel), so the next command finds it warm."""
        try:
            kept = self._kept_for({"host": data, "accept_new": False})
        except wire.ProtocolError:
            return
        try:
            kept.connection()
            self._refill(kept)
            if isinstance(data.get("ahead"), str):
                self._start_ahead(kept, data["ahead"])
        except Exception:
            pass  # the command that asked went direct; the next one will say what is wrong
        finally:
            self._release(kept)

    def _channel(self, kept: Kept) -> paramiko.Channel:
        """The spare channel when it is still good, else a new one (connecting when needed)."""
        t = kept.connection()
        with kept.lock:
            spare, kept.spare = kept.spare, None
        if spare is not None:
            if not spare.closed and spare.get_transport() is t and t.is_active():
                return spare
            spare.close()
        return kept.transport.channel()

    def _refill(self, kept: Kept) -> None:
        """Open the next spare channel in the background (one per host)."""

        def work() -> None:
            with kept.lock:
                if kept.spare is not None:
                    return
            try:
                chan: paramiko.Channel | None = kept.transport.channel()
            except Exception:
                return
            with kept.lock:
                if kept.spare is None:
                    kept.spare, chan = chan, None
            if chan is not None:
                chan.close()

        threading.Thread(target=work, daemon=True).start()

    def _start(self, kept: Kept, command: str) -> SSHProcess:
        return SSHProcess(self._exec_on(kept, self._channel(kept), command))

    def _exec_on(self, kept: Kept, chan: paramiko.Channel, command: str) -> paramiko.Channel:
        fired = threading.Event()

        def give_up() -> None:
            fired.set()
            chan.close()

        # exec waits for the host's reply with no time limit: a connection that went silent (laptop
        # asleep, route gone) would hold the client forever, so it is given up after the timeout.
        watchdog = threading.Timer(CONNECT_TIMEOUT_S, give_up)
        watchdog.start()
        try:
            chan.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as e:
            chan.close()
            if fired.is_set():
                kept.transport.close()  # the next command reconnects instead of waiting again
                raise errors.HostUnreachable(
                    f"{kept.transport.name}: lost the SSH connection (no answer within "
                    f"{CONNECT_TIMEOUT_S:.0f}s)"
                ) from e
            raise errors.HostUnreachable(f"{kept.transport.name}: could not start a command: {e}") from e
        finally:
            watchdog.cancel()
        return chan

    def _take_ready(self, kept: Kept, command: str) -> SSHProcess | None:
        """An agent started ahead for this exact command line that is still waiting, if any."""
        t = kept.connection()
        while True:
            with kept.lock:
                if not kept.ready:
                    return None
                line, chan = kept.ready.pop(0)
            if (
                line == command
                and not chan.closed
                and not chan.exit_status_ready()
                and chan.get_transport() is t
            ):
                with kept.lock:
                    kept.ahead_used += 1
                return SSHProcess(chan)
            chan.close()

    def _start_ahead(self, kept: Kept, command: str) -> None:
        """Keep AHEAD host agents started in the background. The agent's bootstrap reads its first
        request from stdin before it does anything, so one started early is indistinguishable from
        one started on demand, except that its start-up is no longer on the command's path. Two:
        ``logs`` and ``resume`` start two agents one after the other."""

        def work() -> None:
            try:
                chan = self._exec_on(kept, kept.transport.channel(), command)
            except Exception:
                chan = None
            with kept.lock:
                kept.starting -= 1
                keep = chan is not None and len(kept.ready) < AHEAD
                if keep and chan is not None:
                    kept.ready.append((command, chan))
            if chan is not None and not keep:
                chan.close()

        with kept.lock:
            missing = AHEAD - len(kept.ready) - kept.starting
            kept.starting += max(missing, 0)
        for _ in range(missing):
            threading.Thread(target=work, daemon=True).start()

    # -------------------------------------------------------------------------------------- relay
    def _exec(self, conn: socket.socket, reader: wire.FrameReader, request: dict[str, Any]) -> None:
        kept = self._kept_for(request)
        command, ahead = str(request["command"]), bool(request.get("ahead"))
        try:
            try:
                proc = (self._take_ready(kept, command) if ahead else None) or self._start(kept, command)
            except errors.PippaError as e:
                conn.sendall(_error_frame(errors.error_kind(e), str(e)))
                return
            except Exception as e:
                conn.sendall(_error_frame(ErrorKind.INTERNAL, repr(e)))
                return
            with kept.lock:
                kept.commands += 1
            self._refill(kept)
            if ahead:
                self._start_ahead(kept, command)
            try:
                self._relay(conn, reader, proc)
            finally:
                proc.close()
        finally:
            self._release(kept)

    def _relay(self, conn: socket.socket, reader: wire.FrameReader, proc: SSHProcess) -> None:
        """Client frames to the channel here; the channel's output to the client in a thread."""
        send_lock = threading.Lock()

        def send(data: bytes) -> None:
            with send_lock:
                conn.sendall(data)

        send(wire.frame(wire.STARTED))

        def pump() -> None:
            try:
                while chunk := proc.read(wire.CHUNK):
                    send(wire.frame(wire.STDOUT, chunk))
                send(wire.frame(wire.STDOUT))  # stdout ended (the command may still run)
                status = proc.wait()
                send(wire.frame(wire.STDERR, proc.stderr_text().encode()))
                if status == -1 and proc.connection_lost():  # no exit status: the link went, say so
                    send(_error_frame(ErrorKind.HOST_UNREACHABLE, "lost the SSH connection"))
                else:
                    send(wire.frame(wire.EXIT, wire.status_payload(status)))
            except (OSError, TimeoutError):
                pass  # the client went away
            finally:
                proc.close()

        pumper = threading.Thread(target=pump, daemon=True)
        pumper.start()
        writable = True
        while True:
            got = reader.next()
            if got is None:
                break  # the client ended (or died): like a dropped connection, the channel closes
            kind, payload = got
            if kind == wire.STDIN and writable:
                try:
                    proc.write(payload)
                except OSError:
                    writable = False
                    conn.shutdown(socket.SHUT_RD)  # the client's next write fails, as on a closed channel
                    break
            elif kind == wire.STDIN_EOF:
                proc.close_stdin()
            elif kind == wire.KILL:
                proc.kill()
        proc.close()  # a client that went away mid-command: its channel closes, as with a dropped link
        pumper.join()


def _prefetch_from_stdin(keeper: Keeper) -> None:
    for line in sys.stdin:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            threading.Thread(target=keeper.prefetch, args=(data,), daemon=True).start()


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
