"""A host's commands relayed by the connection keeper (``transport.keeper``): ``KeeperTransport`` behaves
as ``SSHTransport`` does (same typed errors, same Process semantics: stdin and its EOF, stdout streamed,
stderr and exit status after the end, kill), and goes direct whenever its ``KeeperClient`` cannot serve.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from pippa_ops.transport.base import (
    CONNECT_TIMEOUT_S,
    Command,
    Process,
    Transport,
    as_shell_line,
)
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.keeper import ops, wire
from pippa_ops.transport.ready import readable

if TYPE_CHECKING:
    from pippa_ops.transport.keeper.wire import Conn


class KeeperService(Protocol):
    """What a ``KeeperTransport`` asks of its client (``keeper.client.KeeperClient``): declared here so
    that the client imports this module and never the other way round."""

    def open(self, request: ops.Op, ep: Endpoint | None = None, ahead: str | None = None) -> Conn | None: ...

    def ask(self, request: ops.Op, wait_s: float, ep: Endpoint | None = None) -> dict[str, Any] | None: ...

    def raise_typed(self, answer: dict[str, Any]) -> None: ...


ANSWER_WAIT_S = 6 * CONNECT_TIMEOUT_S  # the keeper's own connect (TCP, banner, auth, jump hops)
KILL_WAIT_S = 2.0  # how long kill() waits for the command's end, as SSHProcess.kill does


class KeeperProcess(Process):
    """A command relayed by the keeper; the same contract as SSHProcess (``transport.base.Process``).

    Whoever reads (``read``/``wait``) pulls frames under one lock: stdout is buffered for ``read``,
    stderr kept for ``stderr_text``, the exit status ends it. The end of the keeper connection without
    an exit status reads as a dropped SSH connection does: stdout ends, status -1.
    """

    def __init__(self, conn: Conn) -> None:
        super().__init__()
        self._c = conn
        self._out = bytearray()
        self._out_ended = False
        self._err = bytearray()
        self._status: int | None = None
        self._rlock = threading.Lock()
        self._stdin_closed = False
        self._killed = False
        self._lost = False  # the keeper said the host's connection went (or the keeper itself went)

    def _pull(self, deadline: float | None) -> None:
        """One frame from the keeper (the caller holds ``_rlock``); TimeoutError past ``deadline``."""
        try:
            got = self._c.reader.next(deadline)
        except TimeoutError:
            raise
        except (OSError, ValueError, wire.ProtocolError):
            got = None
        self._take(got)

    def _take(self, got: tuple[bytes, bytes] | None) -> None:
        """Fold in one frame (None: the keeper connection ended)."""
        if got is None:
            self._lost = True
            self._end(-1)
            return
        kind, payload = got
        if kind == wire.STDOUT:
            if payload:
                self._out += payload
            else:
                self._out_ended = True
        elif kind == wire.STDERR:
            self._err += payload
        elif kind == wire.EXIT:
            self._end(wire.parse_status(payload))
        else:  # ERROR mid-command: the keeper lost the host's connection under it
            self._lost = True
            self._end(-1)

    def connection_lost(self) -> bool:
        return self._lost

    def _end(self, status: int) -> None:
        self._out_ended = True
        if self._status is None:
            self._status = status
        self._c.close()

    def _read_raw(self, n: int) -> bytes:
        with self._rlock:
            while not self._out and not self._out_ended:
                self._time_left()
                self._pull(self._deadline)
            out = bytes(self._out[:n])
            del self._out[:n]
            return out

    def fileno(self) -> int | None:
        fd = self._c.sock.fileno()
        return None if fd < 0 else fd

    def _read_nowait_raw(self, n: int) -> bytes | None:
        """What is here: a frame may arrive in pieces, so bytes are taken from the socket only when it
        is readable and folded in only once a whole frame is buffered."""
        if not self._rlock.acquire(blocking=False):
            return None  # another thread is reading
        try:
            while not self._out and not self._out_ended:
                got = self._c.reader.pop()
                if got is None:
                    if not readable([self._c.sock], 0):
                        return None
                    try:
                        chunk = self._c.sock.recv(wire.CHUNK)
                    except OSError:
                        chunk = b""
                    if chunk:
                        self._c.reader.feed(chunk)
                        continue
                self._take(got)
            out = bytes(self._out[:n])
            del self._out[:n]
            return out
        except wire.ProtocolError:
            self._take(None)
            return b""
        finally:
            self._rlock.release()

    def write(self, data: bytes) -> None:
        if self._status is not None or self._killed:
            raise OSError("Socket is closed")
        view = memoryview(data)
        try:
            for i in range(0, len(view), wire.CHUNK):
                self._c.send(wire.frame(wire.STDIN, bytes(view[i : i + wire.CHUNK])))
        except OSError as e:
            # The keeper went away (killed, crashed): its socket's EPIPE, passed on as it is, reads to
            # click as this process's own closed stdout, and the command exits 1 with nothing said.
            self._lost = True
            raise ConnectionError(f"the connection keeper went away ({e.strerror or e})") from None

    def close_stdin(self) -> None:
        if self._stdin_closed or self._status is not None:
            return
        self._stdin_closed = True
        with contextlib.suppress(OSError):
            self._c.send(wire.frame(wire.STDIN_EOF))

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._status is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("command still running")
            if not self._rlock.acquire(timeout=-1 if left is None else left):
                continue
            try:
                if self._status is None:
                    self._pull(deadline)
            except TimeoutError as e:
                raise TimeoutError("command still running") from e
            finally:
                self._rlock.release()
        return self._status

    def stderr_text(self) -> str:
        return bytes(self._err).decode(errors="replace")

    def kill(self) -> None:
        """Ask the keeper to KILL the command; return once it has ended (briefly bounded) or, when
        another thread is reading, at once with that read ended."""
        if self._killed:
            return
        self._killed = True
        if self._status is None:
            with contextlib.suppress(OSError):
                self._c.send(wire.frame(wire.KILL))
            if self._rlock.acquire(blocking=False):
                try:
                    deadline = time.monotonic() + KILL_WAIT_S
                    while self._status is None:
                        self._pull(deadline)
                except TimeoutError:
                    pass
                finally:
                    self._rlock.release()
        self.close()

    def release(self) -> None:
        """Lend the host agent back to the keeper, which keeps it for the next command when it is at a
        request boundary with nothing unread (``keeper.relay``), else closes it."""
        if self._status is None and not self._killed and not self._stdin_closed:
            with contextlib.suppress(OSError):
                self._c.send(wire.frame(wire.LEND))
        self.close()

    def close(self) -> None:
        """Close the relay (the keeper closes the channel), without asking for a kill."""
        if self._rlock.acquire(blocking=False):
            try:
                self._c.close()
            finally:
                self._rlock.release()
        else:
            self._c.shutdown()  # the reading thread sees the end and closes


class KeeperTransport(Transport):
    """A host's commands through the keeper, or directly (``SSHTransport``) when it cannot serve."""

    def __init__(
        self,
        endpoint: Endpoint,
        client: KeeperService,
        *,
        accept_new: bool = False,
        timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.name = endpoint.name
        self.endpoint = endpoint
        self._accept_new = accept_new
        self._timeout = timeout
        self._lock = threading.Lock()
        self._direct: Transport | None = None
        self._home: str | None = None
        self._procs: weakref.WeakSet[KeeperProcess] = weakref.WeakSet()

    @property
    def relayed(self) -> bool:
        """False once this transport went direct."""
        return self._direct is None

    def direct(self) -> Transport:
        with self._lock:
            if self._direct is None:
                from pippa_ops.transport.ssh import SSHTransport  # asyncssh: only without a keeper

                self._direct = SSHTransport(self.endpoint, accept_new=self._accept_new, timeout=self._timeout)
            return self._direct

    def start(self, command: Command) -> Process:
        if self._direct is None:
            proc = self._relay(as_shell_line(command))
            if proc is not None:
                return proc
        return self.direct().start(command)

    def _agent_line(self) -> str:
        from pippa_ops.transport import agent_client

        return agent_client.command(self)

    def _relay(self, line: str) -> KeeperProcess | None:
        # The host agent's command may be started ahead by the keeper (it waits for its request).
        agent = self._agent_line()
        request = ops.Exec(self.endpoint.as_json(), self._accept_new, line, ahead=line == agent)
        conn = self.client.open(request, self.endpoint, ahead=agent)
        if conn is None:
            return None
        try:
            got = conn.reader.next(time.monotonic() + ANSWER_WAIT_S)
        except (OSError, TimeoutError, wire.ProtocolError):
            got = None
        if got is not None and got[0] == wire.STARTED:
            proc = KeeperProcess(conn)
            self._procs.add(proc)
            return proc
        conn.close()
        if got is not None and got[0] == wire.ERROR:
            with contextlib.suppress(wire.ProtocolError):
                self.client.raise_typed(wire.parse_json(got[1]))
        return None

    def home(self) -> str:
        if self._home is None:
            answer = None
            if self._direct is None:
                answer = self.client.ask(
                    ops.Home(self.endpoint.as_json(), self._accept_new), ANSWER_WAIT_S, self.endpoint
                )
            self._home = str(answer["home"]) if answer else self.direct().home()
        return self._home

    def close(self) -> None:
        """Like closing an SSH connection: every command still relayed loses its channel."""
        for proc in list(self._procs):
            proc.close()
        if self._direct is not None:
            self._direct.close()
