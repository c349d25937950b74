"""The keeper's relay: every command's Unix-socket client spliced to its SSH channel, in ONE thread.

A paramiko channel cannot be handed to another process, so the keeper relays it (frames in
``keeper_wire``): stdin, stdin's EOF, kill and lend-back from the client; stdout, stderr, the exit
status (or a lost connection) to it. One ``selectors`` loop serves every relay: the client sockets
are non-blocking, and a paramiko channel's ``fileno`` (a pipe paramiko sets when data or EOF
arrives) tells when it has output. What has no descriptor (room in the channel's window for stdin,
an exit status after EOF, the retries of a kill) is polled on a short tick while some relay waits
for it. Output to a slow client is buffered up to OUT_HIGH, then the channel is no longer read
(its SSH window fills and the host's writer waits), as a direct connection would behave.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pippa_contract.errors import ErrorKind
from pippa_ops.transport import keeper_wire as wire
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.ssh import send_signal

OUT_HIGH = 4 << 20  # bytes buffered for a client before its channel is no longer read
STDIN_HIGH = 4 << 20  # stdin buffered for a channel before its client is no longer read
TICK_S = 0.02  # the poll of what has no descriptor, while something waits for it
KILL_TRIES, KILL_EVERY_S = 5, 0.2  # right after exec the command's process group may not exist yet


def error_frame(kind: ErrorKind, message: str) -> bytes:
    """An error answer: the client raises the error of ``kind`` (``internal``: it goes direct)."""
    return wire.json_frame(wire.ERROR, {"error": kind.value, "message": message})


class Tally:
    """Where a host agent's conversation stands (``agent_client``: requests are ``<n>\\n`` + n bytes
    on stdin, each answered by one JSON line; a fresh agent first says ``+``, or ``?`` and reads the
    bundle as one more frame): the keeper lends an agent again only when every request was answered,
    whatever its client claims."""

    def __init__(self, *, fresh: bool) -> None:
        self._status_seen = not fresh
        self._bundle = False
        self._head = b""
        self._skip = 0
        self._frames = 0
        self._lines = 0
        self._broken = False

    def stdin(self, data: bytes) -> None:
        i = 0
        while i < len(data) and not self._broken:
            if self._skip:
                step = min(self._skip, len(data) - i)
                self._skip -= step
                i += step
                continue
            end = data.find(b"\n", i)
            self._head += data[i : len(data) if end < 0 else end]
            if end < 0:
                break
            i = end + 1
            if not self._head.isdigit() or len(self._head) > 12:
                self._broken = True
                break
            self._skip, self._head = int(self._head), b""
            self._frames += 1

    def stdout(self, data: bytes) -> None:
        if not self._status_seen and data:
            self._status_seen, self._bundle = True, data[:1] == b"?"
            data = data[1:]
        self._lines += data.count(b"\n")

    def at_boundary(self) -> bool:
        return (self._status_seen and not self._broken and not self._skip and not self._head
                and self._frames - self._bundle == self._lines)  # fmt: skip


@dataclass(eq=False)
class Relay:
    """One command: its client, its channel, and where each direction stands."""

    conn: socket.socket
    reader: wire.FrameReader
    chan: paramiko.Channel
    done: Callable[[paramiko.Channel | None], None]  # called once: the channel lent back, or None
    first: bytes = b""  # stdout the client reads first (a lent agent's "+", as its bootstrap said)
    tally: Tally | None = None  # a host agent's conversation (None: any other command, never lent)
    out: bytearray = field(default_factory=bytearray)
    stdin: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    stdin_eof: bool = False
    stdout_ended: bool = False  # the channel's EOF seen: waiting for its exit status
    finished: bool = False  # the last frame is queued: close once it is sent
    lend: bool = False
    kills: int = 0
    next_kill: float = 0.0
    chan_fd: int = -1  # the channel's pipe as registered (paramiko closes it with the channel)
    events: int = 0  # the client socket's registered events


class Relays:
    """The relay loop; ``add`` hands it a started command (from any thread)."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._new: list[Relay] = []
        self._relays: set[Relay] = set()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="keeper-relay", daemon=True)
        self._thread.start()

    def add(self, relay: Relay) -> None:
        with self._lock:
            self._new.append(relay)
        self._wake()

    def count(self) -> int:
        with self._lock:
            return len(self._relays) + len(self._new)

    def stop(self) -> None:
        self._stop = True
        self._wake()
        self._thread.join(5)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ------------------------------------------------------------------------------------- loop
    def _loop(self) -> None:
        while not self._stop:
            with self._lock:
                new, self._new = self._new, []
            for r in new:
                self._start(r)
            waiting = any(r.stdin or r.stdout_ended or r.kills for r in self._pending())
            for key, mask in self._sel.select(TICK_S if waiting else 1.0):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                r, side = key.data
                if r not in self._relays:
                    continue
                if side == "chan":
                    self._from_chan(r)
                elif mask & selectors.EVENT_READ:
                    self._from_client(r)
                if r in self._relays and side == "client" and mask & selectors.EVENT_WRITE:
                    self._flush(r)
            for r in self._pending():
                self._poll(r)
        for r in list(self._relays):
            self._end(r, lent=False)

    def _pending(self) -> list[Relay]:
        """The relays ``_poll`` has something to do for. The others (a GPU stream, an agent between
        requests: most of a fleet's) are not polled at every wake-up, which comes once per SSH packet."""
        return [r for r in self._relays if r.stdin or r.stdin_eof or r.lend or r.kills or r.stdout_ended]

    def _start(self, r: Relay) -> None:
        r.conn.setblocking(False)
        self._relays.add(r)
        r.events = selectors.EVENT_READ
        self._sel.register(r.conn, r.events, (r, "client"))
        r.chan_fd = r.chan.fileno()
        self._sel.register(r.chan_fd, selectors.EVENT_READ, (r, "chan"))
        self._send(r, wire.frame(wire.STARTED) + (wire.frame(wire.STDOUT, r.first) if r.first else b""))
        # frames the client sent right behind its request (stdin), already read by the handler
        self._frames(r)

    def _watch_client(self, r: Relay) -> None:
        want = 0 if r.lend else selectors.EVENT_READ
        if len(r.stdin) > STDIN_HIGH:
            want = 0
        if r.out:
            want |= selectors.EVENT_WRITE
        if want != r.events:
            if r.events and want:
                self._sel.modify(r.conn, want, (r, "client"))
            elif want:
                self._sel.register(r.conn, want, (r, "client"))
            else:
                self._sel.unregister(r.conn)
            r.events = want

    def _watch_chan(self, r: Relay, on: bool) -> None:
        key = self._sel.get_map().get(r.chan_fd)
        if on and key is None and not r.chan.closed:
            self._sel.register(r.chan_fd, selectors.EVENT_READ, (r, "chan"))
        elif not on and key is not None:
            self._sel.unregister(r.chan_fd)

    def _close_chan(self, r: Relay) -> None:
        """Close the channel, its pipe unregistered first (a new pipe may get the same number)."""
        with contextlib.suppress(KeyError, ValueError):
            self._watch_chan(r, False)
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            r.chan.close()

    # ------------------------------------------------------------------------------------- client
    def _from_client(self, r: Relay) -> None:
        try:
            data = r.conn.recv(wire.CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client ended (or died): like a dropped connection, the channel closes
            if not r.lend:
                self._end(r, lent=False)
            return
        r.reader.feed(data)
        self._frames(r)

    def _frames(self, r: Relay) -> None:
        try:
            while (got := r.reader.pop()) is not None:
                kind, payload = got
                if kind == wire.STDIN and not r.stdin_eof:
                    r.stdin += payload
                    if r.tally is not None:
                        r.tally.stdin(payload)
                elif kind == wire.STDIN_EOF:
                    r.stdin_eof = True
                elif kind == wire.KILL and not r.kills:
                    r.kills, r.next_kill = KILL_TRIES, 0.0
                elif kind == wire.LEND:
                    r.lend = True
        except wire.ProtocolError:
            self._end(r, lent=False)
            return
        self._watch_client(r)

    def _send(self, r: Relay, data: bytes) -> None:
        r.out += data
        self._flush(r)

    def _flush(self, r: Relay) -> None:
        try:
            while r.out:
                n = r.conn.send(r.out)
                del r.out[:n]
        except BlockingIOError:
            pass
        except OSError:  # the client went away
            self._end(r, lent=False)
            return
        if r.finished and not r.out:
            self._end(r, lent=False)
            return
        self._watch_client(r)
        if not r.stdout_ended and not r.lend:
            self._watch_chan(r, len(r.out) < OUT_HIGH)

    # ------------------------------------------------------------------------------------ channel
    def _from_chan(self, r: Relay) -> None:
        chan = r.chan
        try:
            while chan.recv_stderr_ready():
                r.err += chan.recv_stderr(wire.CHUNK)
            while chan.recv_ready() and len(r.out) < OUT_HIGH:
                chunk = chan.recv(wire.CHUNK)
                if not chunk:
                    break
                if r.tally is not None:
                    r.tally.stdout(chunk)
                r.out += wire.frame(wire.STDOUT, chunk)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        if (chan.eof_received or chan.closed) and not chan.recv_ready():
            r.stdout_ended = True  # paramiko's pipe stays set from now on: the tick takes over
            self._watch_chan(r, False)
            r.out += wire.frame(wire.STDOUT)  # stdout ended (the command may still run)
        self._flush(r)

    def _poll(self, r: Relay) -> None:
        """What has no descriptor: stdin into the window, kill retries, the exit status, lending."""
        chan = r.chan
        try:
            while r.stdin and not chan.closed and chan.send_ready():
                n = chan.send(bytes(r.stdin[: wire.CHUNK]))
                del r.stdin[:n]
                self._watch_client(r)
            if r.stdin_eof and not r.stdin and not chan.closed:
                chan.shutdown_write()
                r.stdin_eof = False
        except (OSError, EOFError, paramiko.SSHException):
            r.stdin.clear()  # the command's stdin is gone, as on a closed channel
            with contextlib.suppress(OSError):
                r.conn.shutdown(socket.SHUT_RD)  # the client's next write fails
        if r.lend and not r.stdin:
            self._lend(r)
            return
        if r.kills and time.monotonic() >= r.next_kill:
            if chan.closed or chan.exit_status_ready() or not send_signal(chan, "KILL") or r.kills == 1:
                r.kills = 0
                self._close_chan(r)
                if not r.stdout_ended:  # the channel is gone: its output ends here
                    r.stdout_ended = True
                    r.out += wire.frame(wire.STDOUT)
                    self._flush(r)
                    if r not in self._relays:
                        return
            else:
                r.kills -= 1
                r.next_kill = time.monotonic() + KILL_EVERY_S
        if r.stdout_ended and not r.finished and (chan.exit_status_ready() or chan.closed):
            self._finish(r)

    def _finish(self, r: Relay) -> None:
        chan = r.chan
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            while chan.recv_stderr_ready():
                r.err += chan.recv_stderr(wire.CHUNK)
        status = chan.exit_status if chan.exit_status_ready() else -1
        r.out += wire.frame(wire.STDERR, bytes(r.err))
        t = chan.get_transport()
        if status == -1 and (t is None or not t.is_active()):  # no exit status: the link went, say so
            r.out += error_frame(ErrorKind.HOST_UNREACHABLE, "lost the SSH connection")
        else:
            r.out += wire.frame(wire.EXIT, wire.status_payload(status))
        r.finished = True
        self._flush(r)

    def _lend(self, r: Relay) -> None:
        """The client had every answer and lends its agent back: kept only with nothing unread."""
        chan = r.chan
        unread = chan.recv_ready() or chan.recv_stderr_ready() or bool(r.err) or bool(r.out)
        ended = r.stdout_ended or bool(r.kills) or chan.closed or chan.eof_received
        ended = ended or chan.exit_status_ready()
        clean = r.tally is not None and r.tally.at_boundary() and not unread and not ended
        self._end(r, lent=clean)

    def _end(self, r: Relay, *, lent: bool) -> None:
        if r not in self._relays:
            return
        self._relays.discard(r)
        if r.events:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(r.conn)
        with contextlib.suppress(KeyError, ValueError):
            self._watch_chan(r, False)
        with contextlib.suppress(OSError):
            r.conn.close()
        if not lent:
            self._close_chan(r)
        with contextlib.suppress(Exception):  # the pool's bookkeeping must never end the loop
            r.done(r.chan if lent else None)
