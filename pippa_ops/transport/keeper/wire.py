"""What the connection keeper (``transport.keeper``) and its clients (``transport.keeper.client``) share:
where the socket lives, who may use it, and the frames they exchange. Imports no asyncssh.

Where: one keeper per user and per client context (HOME, XDG_CONFIG_HOME, team inventory, ssh-agent
socket, this code), so a keeper never answers with another HOME's known_hosts or keys. Its socket is
``k-<digest>.sock`` in a private directory: ``$XDG_RUNTIME_DIR/pippa`` or ``$TMPDIR/pippa-<uid>``
(``$PIPPA_RUNTIME_DIR`` overrides), used only when it is a real directory owned by this user with no
group/other permissions; the socket is created 0600. Both sides also check the peer's uid on every
connection (SO_PEERCRED / LOCAL_PEERCRED), so a loosened mode alone lets no other user in.

Frames: one kind byte, a 4-byte big-endian length, the payload. A client sends ``Q`` (the request,
JSON) then, for a command, ``D`` (stdin bytes), ``E`` (stdin EOF), ``K`` (kill), or ``L`` (lend back: the
host agent it ran answered every request, and the keeper may keep it for the next client). The keeper answers
``A`` at once (it is alive), then ``J`` (a JSON answer), or ``!`` (a typed error), or for a command
``S`` (started), ``O`` (stdout; empty: stdout ended), ``R`` (stderr) and ``X`` (exit status).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import stat
import struct
import sys
import threading
import time

from pippa_ops.transport.ready import readable

# A warm command imports this module (instant.client): what only the keeper's side needs (pathlib,
# hashlib, fcntl, typing) is imported where it is used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

PROTOCOL = 3  # 3: a client may lend its host agent back (L); 2: requests name an Endpoint
DEFAULT_PERSIST_S = 300.0  # like a ControlPersist of a few minutes
MAX_FRAME = 64 << 20
CHUNK = 256 << 10  # stdin/stdout bytes per frame
_HEADER = struct.Struct(">cI")
_STATUS = struct.Struct(">i")

# client -> keeper
REQUEST, STDIN, STDIN_EOF, KILL, LEND = b"Q", b"D", b"E", b"K", b"L"
# keeper -> client
ACK, ANSWER, ERROR, STARTED, STDOUT, STDERR, EXIT = b"A", b"J", b"!", b"S", b"O", b"R", b"X"


class ProtocolError(Exception):
    """The other side spoke something else than this protocol (a broken or foreign keeper)."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: bytes, data: dict[str, Any]) -> bytes:
    return frame(kind, json.dumps(data).encode())


def status_payload(status: int) -> bytes:
    return _STATUS.pack(status)


def parse_status(payload: bytes) -> int:
    if len(payload) != _STATUS.size:
        raise ProtocolError("bad exit frame")
    return int(_STATUS.unpack(payload)[0])


def parse_json(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except ValueError as e:
        raise ProtocolError("bad JSON frame") from e
    if not isinstance(data, dict):
        raise ProtocolError("bad JSON frame")
    return data


class FrameReader:
    """Frames from a stream socket; a read that times out keeps the partial frame for the next one."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock = sock  # None: bytes arrive only through ``feed`` (the keeper's loop reads them)
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        """Bytes read by someone else (the keeper's relay loop reads without blocking)."""
        self._buf += data

    def pop(self) -> tuple[bytes, bytes] | None:
        """The next complete frame already read, or None."""
        if len(self._buf) >= _HEADER.size:
            kind, n = _HEADER.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise ProtocolError(f"frame of {n} bytes")
            if len(self._buf) >= _HEADER.size + n:
                payload = bytes(self._buf[_HEADER.size : _HEADER.size + n])
                del self._buf[: _HEADER.size + n]
                return kind, payload
        return None

    @property
    def partial(self) -> bool:
        return bool(self._buf)

    def next(self, deadline: float | None = None) -> tuple[bytes, bytes] | None:
        """The next (kind, payload); None at a clean end of stream; TimeoutError past ``deadline``.

        The socket stays blocking (a deadline is a poll, not a socket timeout), so another thread
        can write to it meanwhile without its writes timing out."""
        assert self.sock is not None, "a FrameReader without a socket is fed"
        while True:
            got = self.pop()
            if got is not None:
                return got
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not readable([self.sock], left):
                    raise TimeoutError("no answer in time")
            chunk = self.sock.recv(CHUNK + _HEADER.size)
            if not chunk:
                if self._buf:
                    raise ProtocolError("stream ended inside a frame")
                return None
            self._buf += chunk


# -- where, and who --------------------------------------------------------------------------------
def runtime_path() -> str:
    """The private directory of the sockets (``runtime_dir`` as a string)."""
    override = os.environ.get("PIPPA_RUNTIME_DIR")
    if override:
        return override
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        return os.path.join(xdg, "pippa")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"pippa-{os.getuid()}")


def runtime_dir() -> Path:
    from pathlib import Path

    return Path(runtime_path())


def private_dir(path: str | Path, *, create: bool) -> bool:
    """True when ``path`` is a directory of this user's that no one else can enter (created 0700)."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)  # ours, but loose (a umask, a copy): tighten it
        except OSError:
            return False
    return True


@functools.lru_cache(maxsize=1)  # the code this process runs was loaded once: stat it once
def _code_stamp() -> str:
    """This code's identity: a keeper started by another checkout or an older version is not used."""
    from pathlib import Path

    here = Path(__file__).parent
    parts = [str(here)]
    names = (
        "server.py",
        "client.py",
        "process.py",
        "wire.py",
        "ops.py",
        "pool.py",
        "relay.py",
        "conn.py",
        "../hostkey.py",
        "../ssh.py",
        "../endpoint.py",
        "../ready.py",
    )
    for name in names:
        try:
            parts.append(str(os.stat(here / name).st_mtime_ns))
        except OSError:
            parts.append("-")
    return ":".join(parts)


def context(team_inventory: str) -> dict[str, str]:
    """What a keeper's answers depend on; one keeper per distinct value."""
    return {
        "protocol": str(PROTOCOL),
        "uid": str(os.getuid()),
        "home": os.path.expanduser("~"),  # Path.home()
        "xdg_config_home": os.environ.get("XDG_CONFIG_HOME", ""),
        "team_inventory": team_inventory,
        "ssh_auth_sock": os.environ.get("SSH_AUTH_SOCK", ""),
        "code": _code_stamp(),
        "python": sys.prefix,  # the environment (venv), not the name the interpreter was called by
    }


def socket_path(ctx: dict[str, str]) -> Path:
    import hashlib

    digest = hashlib.sha256(json.dumps(ctx, sort_keys=True).encode()).hexdigest()[:20]
    return runtime_dir() / f"k-{digest}.sock"


def connect(path: str | Path, timeout_s: float) -> socket.socket:
    """A blocking connection to the Unix socket at ``path``, given ``timeout_s`` to be accepted (a
    refused, missing or silent socket raises OSError; the caller checks the peer)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(str(path))
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (None: this platform cannot tell)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    if sys.platform == "darwin" or "bsd" in sys.platform:  # struct xucred {version, uid, ...}
        local_peercred = getattr(socket, "LOCAL_PEERCRED", 0x001)
        creds = sock.getsockopt(0, local_peercred, 76)  # level SOL_LOCAL = 0
        return int(struct.unpack_from("=II", creds)[1])
    return None


def peer_is_me(sock: socket.socket) -> bool:
    try:
        return peer_uid(sock) == os.getuid()
    except OSError:
        return False


def persist_s() -> float:
    """How long a keeper stays after its last client (``$PIPPA_PERSIST_S``, seconds)."""
    try:
        value = float(os.environ.get("PIPPA_PERSIST_S", DEFAULT_PERSIST_S))
    except ValueError:
        return DEFAULT_PERSIST_S
    return value if value >= 0 else DEFAULT_PERSIST_S


def listen(path: Path) -> socket.socket | None:
    """A keeper's (or the warm process's) socket, bound 0600; None when another one holds the lock or the
    dir is not ours."""
    import fcntl

    if not private_dir(path.parent, create=True):
        return None
    lock_fd = os.open(str(path.with_suffix(".lock")), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_fd)
        return None  # another one is starting or running for this context
    # The lock stays held (fd left open) for the process's life; it names its pid, so
    # `pippa hosts --disconnect` can end a keeper that no longer answers.
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, str(os.getpid()).encode())
    try:  # noqa: SIM105 - contextlib's import would cost every warm command (they import this module)
        os.unlink(path)  # a stale socket of a keeper that died
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(64)
    return sock


class Conn:
    """One connection to the keeper."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader(sock)
        self._send_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(data)

    def shutdown(self) -> None:
        """Ends the stream both ways; wakes a thread blocked reading or writing it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.shutdown()
        with self._send_lock:
            self.sock.close()
