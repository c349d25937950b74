"""pippa's one SSH stack: asyncssh connections on an asyncio loop, for the keeper and the direct path.

The connection keeper holds these on its loop; a command's own connection (``ssh.SSHTransport``,
``--no-reuse``, the fallback, ``pippa forward``) holds them on a loop thread of its process. Either way
one connect (``HostConn``: the ``Endpoint`` that ``hosts.endpoint`` resolved, its ProxyJump hops, the
host-key policy ``hostkey.check``, keepalives every KEEPALIVE_S), one cipher list and one map of
failures to one-line errors. ~/.ssh/config is not read here again (``config=[]``): the endpoint
already holds what it says.

``Chan`` is one command's session channel: its stdout goes to whoever is attached (the relay, a direct
process), or is held while nobody is (a host agent waiting in the keeper's pool, which must have
nothing to say).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import socket
import weakref
from collections.abc import Callable
from pathlib import Path

import asyncssh

from pippa_ops.errors import AuthFailed, HostKeyRejected, HostUnreachable, PippaError
from pippa_ops.transport import hostkey
from pippa_ops.transport.endpoint import Endpoint

# asyncssh logs every connection at INFO and a failed one at WARNING; the failure reaches the client
# as one typed error already, so nothing is printed (the keeper's stderr is its log file).
logging.getLogger("asyncssh").addHandler(logging.NullHandler())
logging.getLogger("asyncssh").propagate = False

Conn = asyncssh.SSHClientConnection
DEFAULT_KEYS = (
    "id_ed25519",
    "id_ecdsa",
    "id_rsa",
)  # tried after an endpoint's IdentityFiles, as OpenSSH does
KEEPALIVE_S = 15
AEAD_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def unreachable(name: str, ep: Endpoint, why: str) -> HostUnreachable:
    return HostUnreachable(f"{name}: cannot reach {ep.hostname}:{ep.port}: {why}")


def auth_failed(name: str, ep: Endpoint, why: object) -> AuthFailed:
    # without a user, asyncssh logs in as the local user: name the one tried
    who = f"{ep.user}@{ep.hostname}" if ep.user else f"{getpass.getuser()}@{ep.hostname} (no user set)"
    return AuthFailed(
        f"{name}: authentication failed for {who} (no key accepted from the agent, "
        f"{', '.join(ep.identity_files) or '~/.ssh/id_*'}): {why}"
    )


def open_socket_error(name: str, ep: Endpoint, e: OSError, timeout: float) -> HostUnreachable:
    """A failed TCP connect as one line."""
    if isinstance(e, socket.gaierror):
        return unreachable(name, ep, f"address does not resolve ({e.strerror})")
    if isinstance(e, ConnectionRefusedError):
        return unreachable(name, ep, "connection refused (is sshd running?)")
    if isinstance(e, TimeoutError):
        return unreachable(name, ep, f"no answer within {timeout:.0f}s")
    return unreachable(name, ep, e.strerror or str(e))


class Chan(asyncssh.SSHClientSession[bytes]):
    """One command's channel: output to ``sink`` (or ``held``), stderr collected, the end recorded."""

    def __init__(self) -> None:
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.sink: Callable[[bytes], None] | None = None
        self.held = bytearray()
        self.err = bytearray()
        self.eof = False
        self.status: int | None = None  # the exit status; -1 for a command killed by a signal
        self.closed = False
        self.lost = False  # the connection went with the channel open
        self.changed = asyncio.Event()  # set at EOF, an exit status, a close
        self.on_change: Callable[[], None] | None = None  # told too (a direct process's waiting thread)
        self.writable = asyncio.Event()
        self.writable.set()

    # asyncssh's callbacks
    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:  # type: ignore[override]
        self.channel = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            self.err += data
        elif self.sink is not None:
            self.sink(data)
        else:
            self.held += data

    def _changed(self) -> None:
        self.changed.set()
        if self.on_change is not None:
            self.on_change()

    def eof_received(self) -> bool:
        self.eof = True
        self._changed()
        return True  # half open: the command may still read its stdin

    def exit_status_received(self, status: int) -> None:
        self.status = status
        self._changed()

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self.status = -1  # a command that ended by a signal has no exit status
        self._changed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = self.lost or exc is not None  # (set already when the keeper closed the connection)
        self.writable.set()
        self._changed()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # the relay's and the pool's side
    @property
    def ended(self) -> bool:
        return self.eof or self.closed or self.status is not None

    def idle(self, *, fresh: bool = False) -> bool:
        """Running, with nothing said since its last answer: an agent the pool may hand out (a
        ``fresh`` one has said at most its bootstrap's status byte, which its first client reads)."""
        return not self.ended and not self.err and len(self.held) <= (1 if fresh else 0)

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()`` holds; it is asked again at each EOF, exit status and close."""
        while not done():
            self.changed.clear()
            await self.changed.wait()

    def write(self, data: bytes) -> None:
        if self.channel is not None and not self.closed:
            self.channel.write(data)

    def write_eof(self) -> None:
        if self.channel is not None and not self.closed:
            self.channel.write_eof()

    def unsent(self) -> int:
        return self.channel.get_write_buffer_size() if self.channel is not None and not self.closed else 0

    def signal(self, name: str) -> bool:
        """Ask sshd to deliver ``name`` (OpenSSH >= 7.9); False when the channel is gone."""
        if self.channel is None or self.closed:
            return False
        try:
            self.channel.send_signal(name)
        except (OSError, asyncssh.Error):
            return False
        return True

    def close(self) -> None:
        if self.channel is not None and not self.closed:
            self.channel.close()


class _Client(asyncssh.SSHClient):
    """The host-key check (``hostkey.check``), and whether the connection is alive."""

    def __init__(self, name: str, known_name: str, accept_new: bool) -> None:
        self._name, self._known_name, self._accept_new = name, known_name, accept_new
        self.refused: PippaError | None = None
        self.alive = True

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        offered = hostkey.Offered(key.get_algorithm(), key.public_data, key.get_fingerprint())
        try:
            hostkey.check(self._name, self._known_name, offered, accept_new=self._accept_new)
        except HostKeyRejected as e:
            self.refused = e
            return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False


class HostConn:
    """One host's asyncssh connection (and its hops'), opened on first use, one connect at a time."""

    def __init__(self, ep: Endpoint, accept_new: bool, timeout: float) -> None:
        self.ep, self.name, self._accept_new, self._timeout = ep, ep.name, accept_new, timeout
        self._lock = asyncio.Lock()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._client: _Client | None = None
        self._jump: HostConn | None = None
        self._chans: weakref.WeakSet[Chan] = weakref.WeakSet()  # channels on the live connection
        self.opened = 0  # connections made so far (the keeper's status shows it)

    def alive(self) -> bool:
        return self._conn is not None and self._client is not None and self._client.alive

    async def connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is not None and self.alive():
                return self._conn
            self.close()
            self._conn = await self._connect()
            self.opened += 1
            return self._conn

    async def _connect(self) -> asyncssh.SSHClientConnection:
        ep = self.ep
        if ep.proxy_jump and ep.jump is None:
            raise ValueError(f"{self.name}: ProxyJump {ep.proxy_jump!r} not resolved (hosts.endpoint does)")
        client = _Client(self.name, ep.known_hosts_name, self._accept_new)
        self._client = client
        sock: socket.socket | None = None
        tunnel: asyncssh.SSHClientConnection | None = None
        if ep.jump is not None:
            self._jump = HostConn(ep.jump, self._accept_new, self._timeout)
            tunnel = await self._jump.connection()
        else:
            sock = await open_socket(self.name, ep, self._timeout)
        try:
            return await self._login(ep, client, sock, tunnel)
        except BaseException:
            if sock is not None:
                sock.close()  # (a no-op once asyncssh's transport has closed it)
            raise

    async def _login(
        self, ep: Endpoint, client: _Client, sock: socket.socket | None, tunnel: Conn | None
    ) -> Conn:
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    ep.hostname,
                    ep.port,
                    tunnel=tunnel if tunnel is not None else (),
                    sock=sock,
                    config=[],
                    client_factory=lambda: client,
                    known_hosts=([], [], []),
                    username=ep.user or (),
                    client_keys=_identities(ep),
                    ignore_encrypted=True,
                    keepalive_interval=KEEPALIVE_S,
                    login_timeout=self._timeout,
                    server_host_key_algs=_host_key_algs(ep.known_hosts_name),
                    encryption_algs=_CIPHERS,
                ),
                self._timeout,
            )
        except (asyncssh.HostKeyNotVerifiable, asyncssh.KeyExchangeFailed) as e:
            if client.refused is not None:
                raise client.refused from e
            raise unreachable(self.name, ep, f"SSH handshake failed: {e}") from e
        except asyncssh.PermissionDenied as e:
            raise auth_failed(self.name, ep, e.reason or "no method left") from e
        except asyncssh.ChannelOpenError as e:
            raise unreachable(self.name, ep, f"via {ep.jump.name if ep.jump else '?'}: {e.reason}") from e
        except TimeoutError as e:
            why = f"SSH handshake failed: no answer within {self._timeout:.0f}s"
            raise unreachable(self.name, ep, why) from e
        except (ConnectionResetError, asyncssh.ConnectionLost, EOFError) as e:
            why = "SSH handshake failed: the host closed the connection (is an SSH server on that port?)"
            raise unreachable(self.name, ep, why) from e
        except (asyncssh.Error, OSError) as e:
            raise unreachable(self.name, ep, f"SSH handshake failed: {e or type(e).__name__}") from e

    async def exec(self, command: str) -> Chan:
        """``command`` started on a new channel; a host that does not answer within the timeout (laptop
        asleep, route gone) is given up and the connection closed, so the next command reconnects."""
        conn = await self.connection()
        try:
            started = conn.create_session(Chan, command, encoding=None)
            _, session = await asyncio.wait_for(started, self._timeout)
        except TimeoutError as e:
            self.close()
            raise HostUnreachable(
                f"{self.name}: lost the SSH connection (no answer within {self._timeout:.0f}s)"
            ) from e
        except (asyncssh.Error, OSError, EOFError) as e:
            raise HostUnreachable(f"{self.name}: could not start a command: {e}") from e
        assert isinstance(session, Chan)
        self._chans.add(session)
        return session

    def owns(self, chan: Chan) -> bool:
        """``chan`` is on the live connection (not one closed since)."""
        return self.alive() and chan.channel is not None and chan.channel.get_connection() is self._conn

    def close(self) -> None:
        """Close the connection; its channels' commands read as lost (no exit status will come)."""
        for chan in list(self._chans):
            chan.lost = True
        self._chans = weakref.WeakSet()
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        if self._jump is not None:
            self._jump.close()
            self._jump = None


# AES-GCM first (AEAD_FIRST): one AEAD pass per packet with AES-NI,
# where asyncssh's default first choice, chacha20-poly1305, is two passes; the rest as asyncssh has them.
_CIPHERS = [
    *AEAD_FIRST,
    *(a.decode() for a in asyncssh.encryption.get_default_encryption_algs() if a.decode() not in AEAD_FIRST),
]


def _host_key_algs(known_name: str) -> list[str]:
    """``hostkey.algorithms`` that asyncssh has (the known keys' first; no certificates)."""
    have = {a.decode() for a in asyncssh.public_key.get_public_key_algs()}
    return [a for a in hostkey.algorithms(known_name) if a in have]


def _identities(ep: Endpoint) -> list[str] | tuple[()]:
    """The endpoint's IdentityFiles, then the default keys that exist (OpenSSH's defaults):
    the agent's keys are offered first either way (``SSH_AUTH_SOCK``)."""
    if not ep.identity_files:
        return ()  # asyncssh's own default: the agent, then ~/.ssh/id_*
    ssh_dir = Path.home() / ".ssh"
    defaults = [str(ssh_dir / n) for n in DEFAULT_KEYS if (ssh_dir / n).is_file()]
    return [str(Path(p).expanduser()) for p in ep.identity_files] + defaults


async def open_socket(name: str, ep: Endpoint, timeout: float) -> socket.socket:
    """A connected TCP socket to ``ep``, or one line saying why not (``open_socket_error``)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(ep.hostname, ep.port, type=socket.SOCK_STREAM), timeout
        )
    except OSError as e:
        raise open_socket_error(name, ep, e, timeout) from e
    last: OSError = OSError("no address")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
        except OSError as e:  # TimeoutError included
            sock.close()
            last = e
            continue
        return sock
    raise open_socket_error(name, ep, last, timeout) from last
