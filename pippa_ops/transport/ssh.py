"""The SSH transport: one paramiko connection per host, shared by every channel of a command.

Why paramiko and one connection: a command (sync, up, the dashboard's pollers, fan-out) opens many
channels to one host; one TCP+SSH handshake serves them all, from any thread. The connection opens
on first use and closes idempotently.

Host keys are checked against ~/.ssh/known_hosts by ``hostkey`` (the policy the keeper's connections
use too), like OpenSSH with ``StrictHostKeyChecking=yes``: an unknown key is refused with its SHA256
fingerprint unless ``accept_new`` (then it is recorded, like OpenSSH's ``accept-new``); a changed key
is always refused. Connection failures become one-line
typed errors (unreachable, auth, host key).
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import socket
import threading

from pippa_ops.errors import AuthFailed, HostKeyRejected, HostUnreachable
from pippa_ops.transport import hostkey
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.base import (
    CONNECT_TIMEOUT_S,
    Command,
    Process,
    Transport,
    as_shell_line,
)
from pippa_ops.transport.endpoint import Endpoint

KEEPALIVE_S = 15

# paramiko's transport thread logs a failed handshake ("Error reading SSH protocol banner") with a
# traceback; with no handler configured Python's last-resort handler prints it to stderr. The same
# failure already reaches the caller as one typed error, so paramiko stays silent unless the CLI's
# --debug attaches a handler (pippa_ops.cli.app).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def unreachable(name: str, ep: Endpoint, why: str) -> HostUnreachable:
    return HostUnreachable(f"{name}: cannot reach {ep.hostname}:{ep.port}: {why}")


def auth_failed(name: str, ep: Endpoint, why: object) -> AuthFailed:
    # without a user, both stacks log in as the local user: name the one tried either way
    who = f"{ep.user}@{ep.hostname}" if ep.user else f"{getpass.getuser()}@{ep.hostname} (no user set)"
    return AuthFailed(
        f"{name}: authentication failed for {who} (no key accepted from the agent, "
        f"{', '.join(ep.identity_files) or '~/.ssh/id_*'}): {why}"
    )


def open_socket_error(name: str, ep: Endpoint, e: OSError, timeout: float) -> HostUnreachable:
    """A failed TCP connect as one line (both SSH stacks open their sockets the same way)."""
    if isinstance(e, socket.gaierror):
        return unreachable(name, ep, f"address does not resolve ({e.strerror})")
    if isinstance(e, ConnectionRefusedError):
        return unreachable(name, ep, "connection refused (is sshd running?)")
    if isinstance(e, TimeoutError):
        return unreachable(name, ep, f"no answer within {timeout:.0f}s")
    return unreachable(name, ep, e.strerror or str(e))


def _open_socket(name: str, ep: Endpoint, timeout: float) -> socket.socket:
    try:
        return socket.create_connection((ep.hostname, ep.port), timeout=timeout)
    except OSError as e:
        raise open_socket_error(name, ep, e, timeout) from e


AEAD_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
ACTIVE_CHECK_S = 1.0  # how often an idle connection's reader thread wakes (paramiko: 0.1 s)


class _Transport(paramiko.Transport):
    """paramiko's Transport, its reader thread waking once a second instead of ten times.

    The thread reads its socket with a timeout (``_active_check_timeout``, paramiko's class attribute,
    0.1 s) only to notice a close and to send keepalives. A command that holds one connection per host
    (a dashboard or fan-out without the keeper, whose own connections are asyncssh's on one loop)
    woke 640 times a second at 64 hosts with nothing to read. Nothing waits on that
    timeout: ``close()`` does not join the thread (paramiko's ``stop_thread`` returns once the
    packetizer is closed), so a closed connection's thread ends within ACTIVE_CHECK_S, unseen, and
    keepalives (KEEPALIVE_S) and handshake timeouts are checked to the second."""

    _active_check_timeout = ACTIVE_CHECK_S


def _transport_factory(
    sock: socket.socket | paramiko.Channel, host_key_algs: list[str], **kwargs: object
) -> paramiko.Transport:
    """Prefer AES-GCM (one AEAD pass per packet instead of AES-CTR plus a separate HMAC): faster bulk
    sync; OpenSSH has offered it since 6.2, and the rest of paramiko's list stays as a fallback. Ask
    for the host keys known_hosts has first (``hostkey.algorithms``)."""
    t = _Transport(sock, **kwargs)  # type: ignore[arg-type]
    opts = t.get_security_options()
    ciphers = list(opts.ciphers)
    opts.ciphers = [c for c in AEAD_FIRST if c in ciphers] + [c for c in ciphers if c not in AEAD_FIRST]
    offered = list(opts.key_types)
    first = [a for a in host_key_algs if a in offered]
    opts.key_types = first + [a for a in offered if a not in first]
    return t


class SSHTransport(Transport):
    """Commands on one host over one lazily opened, shared, keepalive'd paramiko connection; where to
    connect (address, user, keys, ProxyJump hops) is the ``Endpoint`` that ``hosts.endpoint`` resolved."""

    def __init__(
        self, endpoint: Endpoint, *, accept_new: bool = False, timeout: float = CONNECT_TIMEOUT_S
    ) -> None:
        self.name = endpoint.name
        self.endpoint = endpoint
        self._accept_new = accept_new
        self._timeout = timeout
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHTransport | None = None
        self._home: str | None = None

    # -- connection ---------------------------------------------------------------------------
    def connection(self) -> paramiko.Transport:
        """The live paramiko transport, connecting on first use (thread-safe)."""
        with self._lock:
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return t
                self._client.close()
                self._client = None
            self._client = self._connect()
            t = self._client.get_transport()
            assert t is not None
            return t

    def _connect(self) -> paramiko.SSHClient:
        ep = self.endpoint
        if ep.proxy_jump and ep.jump is None:  # never straight to a host that must be reached via hops
            raise ValueError(f"{self.name}: ProxyJump {ep.proxy_jump!r} not resolved (hosts.endpoint does)")
        if self._jump is not None:  # a reconnect: the old hop's connection goes with the old one
            self._jump.close()
            self._jump = None
        if ep.jump is not None:
            self._jump = SSHTransport(ep.jump, accept_new=self._accept_new, timeout=self._timeout)
            try:
                sock: socket.socket | paramiko.Channel = self._jump.connection().open_channel(
                    "direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0), timeout=self._timeout
                )
            except paramiko.SSHException as e:
                raise unreachable(self.name, ep, f"via {ep.jump.name}: {e}") from e
        else:
            sock = _open_socket(self.name, ep, self._timeout)
        client = paramiko.SSHClient()  # no host keys loaded: every key offered goes to the one policy
        client.set_missing_host_key_policy(hostkey.Policy(self.name, ep.known_hosts_name, self._accept_new))
        try:
            client.connect(
                ep.hostname,
                port=ep.port,
                username=ep.user,
                key_filename=list(ep.identity_files) or None,  # type: ignore[arg-type]
                timeout=self._timeout,
                banner_timeout=self._timeout,
                auth_timeout=self._timeout,
                channel_timeout=self._timeout,
                allow_agent=True,
                look_for_keys=True,
                sock=sock,
                transport_factory=functools.partial(  # type: ignore[arg-type]
                    _transport_factory, host_key_algs=hostkey.algorithms(ep.known_hosts_name)
                ),
            )
        except HostKeyRejected:
            client.close()
            raise
        except paramiko.AuthenticationException as e:
            client.close()
            raise auth_failed(self.name, ep, e) from e
        except (paramiko.SSHException, EOFError, OSError) as e:
            client.close()
            raise unreachable(self.name, ep, f"SSH handshake failed: {e or type(e).__name__}") from e
        t = client.get_transport()
        assert t is not None
        t.set_keepalive(KEEPALIVE_S)
        return client

    def channel(self) -> paramiko.Channel:
        """A new session channel on the shared connection."""
        t = self.connection()
        try:
            return t.open_session(timeout=self._timeout)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise HostUnreachable(f"{self.name}: lost the SSH connection: {e}") from e

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._jump is not None:
                self._jump.close()
                self._jump = None

    # -- commands -----------------------------------------------------------------------------
    def start(self, command: Command) -> SSHProcess:
        chan = self.channel()
        try:
            chan.exec_command(as_shell_line(command))
        except (paramiko.SSHException, EOFError, OSError) as e:
            chan.close()
            raise HostUnreachable(f"{self.name}: could not start a command: {e}") from e
        return SSHProcess(chan)

    def home(self) -> str:
        if self._home is None:
            r = self.run('printf %s "$HOME"', timeout=self._timeout * 3, check=True)
            self._home = r.stdout.strip()
        return self._home


class SSHProcess(Process):
    """A command on a channel: stdout streamed, stderr collected in the background (so it never stalls)."""

    def __init__(self, chan: paramiko.Channel) -> None:
        super().__init__()
        self._chan = chan
        self._err = bytearray()
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()

    def _drain_stderr(self) -> None:
        try:
            while True:
                chunk = self._chan.recv_stderr(65536)
                if not chunk:
                    return
                self._err += chunk
        except (TimeoutError, OSError, EOFError):
            return

    def _read_raw(self, n: int) -> bytes:
        self._chan.settimeout(self._time_left())
        try:
            return self._chan.recv(n)
        except TimeoutError as e:
            raise TimeoutError("read timed out") from e
        except EOFError as e:  # paramiko, when the window adjust after a large read finds the link gone
            raise HostUnreachable("lost the SSH connection while reading") from e

    def fileno(self) -> int | None:
        return None if self._chan.closed else self._chan.fileno()

    def _read_nowait_raw(self, n: int) -> bytes | None:
        if self._chan.recv_ready():
            return self._chan.recv(n)
        return b"" if self._chan.eof_received or self._chan.closed else None

    def write(self, data: bytes) -> None:
        self._chan.sendall(data)

    def close_stdin(self) -> None:
        if not self._chan.closed:
            self._chan.shutdown_write()

    def wait(self, timeout: float | None = None) -> int:
        if not self._chan.status_event.wait(timeout):
            raise TimeoutError("command still running")
        self._err_thread.join(timeout=5)
        return self._chan.recv_exit_status()

    def stderr_text(self) -> str:
        return bytes(self._err).decode(errors="replace")

    def connection_lost(self) -> bool:
        t = self._chan.get_transport()
        return self._chan.exit_status == -1 and (t is None or not t.is_active())

    def kill(self) -> None:
        """Ask sshd to KILL the command (OpenSSH ≥ 7.9 honours the signal request), then close.

        Sent again a few times: right after exec the session's process group may not exist yet.
        """
        chan = self._chan
        for _ in range(5):
            if chan.closed or chan.exit_status_ready() or not self._send_signal("KILL"):
                break
            chan.status_event.wait(0.2)
        self.close()

    def _send_signal(self, name: str) -> bool:
        return send_signal(self._chan, name)

    def close(self) -> None:
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            self._chan.close()  # raises only when the connection is gone, and the channel with it


def send_signal(chan: paramiko.Channel, name: str) -> bool:
    """Ask sshd to deliver signal ``name`` to the channel's command (RFC 4254 6.9; paramiko has no
    public call for it). False when the connection is gone."""
    try:
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
        m.add_int(chan.remote_chanid)
        m.add_string("signal")
        m.add_boolean(False)
        m.add_string(name)
        chan.transport._send_user_message(m)  # type: ignore[union-attr]
    except (paramiko.SSHException, OSError, EOFError, AttributeError):
        return False
    return True
