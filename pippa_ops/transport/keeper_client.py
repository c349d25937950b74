"""The command side of the connection keeper (``transport.keeper``): a Transport whose commands run on
the keeper's kept SSH connections, and the ssh-config answers that spare a command importing paramiko.

Reuse is off for a library caller and on for the CLI (``reuse.configure``), unless ``--no-reuse`` or
``PIPPA_NO_REUSE=1``. A ``KeeperTransport`` behaves as ``SSHTransport`` does (same typed errors, same
Process semantics: stdin and its EOF, stdout streamed, stderr and exit status after the end, kill); it
never fails because of the keeper: when the keeper is absent, stale (a socket nobody listens on) or
broken (no ``A`` within ``ACK_WAIT_S``, a foreign peer, garbage), it connects directly, as before.
An absent keeper is started when the command exits (so a cold command costs what it did before)
and connects at once to the hosts that command used, so the next command finds them warm.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import stat
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from pippa_contract.errors import ErrorKind
from pippa_ops import errors
from pippa_ops.repo import team_inventory_path
from pippa_ops.transport import keeper_wire as wire
from pippa_ops.transport import reuse
from pippa_ops.transport.base import (
    CONNECT_TIMEOUT_S,
    Command,
    CommandResult,
    Process,
    Transport,
    as_shell_line,
    run_started,
)
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.sshconfig import ssh_config_path

ACK_WAIT_S = 2.0  # a live keeper answers A at once; a stopped or wedged one is given up after this
ANSWER_WAIT_S = 6 * CONNECT_TIMEOUT_S  # the keeper's own connect (TCP, banner, auth, jump hops)
KILL_WAIT_S = 2.0  # how long kill() waits for the command's end, as SSHProcess.kill does

_lock = threading.Lock()
_broken: set[Path] = set()  # keepers this process found unusable: straight to direct
_prefetch: dict[str, dict[str, Any]] = {}  # hosts for a keeper started at exit
_config_cache: dict[tuple[object, ...], KeptSSHConfig] = {}


def forget() -> None:
    """Drop what this process learnt about keepers (broken ones, cached answers): tests, benches."""
    with _lock:
        _broken.clear()
        _prefetch.clear()
        _config_cache.clear()


def reuse_enabled() -> bool:
    """Reuse asked for (``reuse.configure``), and a platform that can tell a socket peer's uid."""
    if not reuse.requested():
        return False
    return hasattr(socket, "SO_PEERCRED") or sys.platform == "darwin" or "bsd" in sys.platform


def socket_path() -> Path:
    return wire.socket_path(wire.context(str(team_inventory_path())))


def host_fields(ep: Endpoint) -> dict[str, Any]:
    """The host of a request: the endpoint this command resolved (the keeper resolves nothing)."""
    return ep.as_json()


# -- one connection to the keeper -------------------------------------------------------------------
class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = wire.FrameReader(sock)
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


def _absent(ep: Endpoint | None, ahead: str | None) -> None:
    """No keeper: remember the host, and start one when this process exits (the CLI only)."""
    if ep is None or not reuse.spawn():
        return
    with _lock:
        first = not _prefetch
        _prefetch[ep.name] = {**host_fields(ep), "ahead": ahead}
    if first:
        atexit.register(_spawn_at_exit)


def _open(request: dict[str, Any], ep: Endpoint | None = None, ahead: str | None = None) -> _Conn | None:
    """A connection to the keeper that has acknowledged ``request``; None: go direct."""
    path = socket_path()
    if path in _broken:
        return None
    if not wire.private_dir(path.parent, create=False):
        if not path.parent.exists():
            _absent(ep, ahead)
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _absent(ep, ahead)
        return None
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        _broken.add(path)
        return None
    try:
        sock = wire.connect(path, ACK_WAIT_S)
    except (ConnectionRefusedError, FileNotFoundError):  # a stale socket: its keeper is gone
        _absent(ep, ahead)
        return None
    except OSError:
        _broken.add(path)
        return None
    if not wire.peer_is_me(sock):
        sock.close()
        _broken.add(path)
        return None
    conn = _Conn(sock)
    try:
        conn.send(wire.json_frame(wire.REQUEST, request))
        got = conn.reader.next(time.monotonic() + ACK_WAIT_S)
    except (OSError, TimeoutError, wire.ProtocolError):
        got = None
    if got is None or got[0] != wire.ACK:
        conn.close()
        _broken.add(path)
        return None
    return conn


def _raise_typed(answer: dict[str, Any]) -> None:
    """Re-raise the keeper's typed error (host unreachable, key changed, ...) as this process's own."""
    kind, message = ErrorKind.parse(answer.get("error")), str(answer.get("message", ""))
    cls = errors.error_class(kind, Exception)
    if cls is not Exception:
        raise cls(message)
    # "internal" or unknown: the keeper could not do it; the caller goes direct


def _ask(request: dict[str, Any], wait_s: float, ep: Endpoint | None = None) -> dict[str, Any] | None:
    """One JSON request and its answer; None when the keeper cannot answer (go direct)."""
    conn = _open(request, ep)
    if conn is None:
        return None
    try:
        got = conn.reader.next(time.monotonic() + wait_s)
    except (OSError, TimeoutError, wire.ProtocolError):
        got = None
    finally:
        conn.close()
    if got is None:
        return None
    kind, payload = got
    try:
        answer = wire.parse_json(payload)
    except wire.ProtocolError:
        return None
    if kind == wire.ERROR:
        _raise_typed(answer)
        return None
    return answer if kind == wire.ANSWER else None


# -- commands -----------------------------------------------------------------------------------------
class KeeperProcess(Process):
    """A command relayed by the keeper; the same contract as SSHProcess (``transport.base.Process``).

    Whoever reads (``read``/``wait``) pulls frames under one lock: stdout is buffered for ``read``,
    stderr kept for ``stderr_text``, the exit status ends it. The end of the keeper connection without
    an exit status reads as a dropped SSH connection does: stdout ends, status -1.
    """

    def __init__(self, conn: _Conn) -> None:
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

    def write(self, data: bytes) -> None:
        if self._status is not None or self._killed:
            raise OSError("Socket is closed")
        view = memoryview(data)
        for i in range(0, len(view), wire.CHUNK):
            self._c.send(wire.frame(wire.STDIN, bytes(view[i : i + wire.CHUNK])))

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
        self, endpoint: Endpoint, *, accept_new: bool = False, timeout: float = CONNECT_TIMEOUT_S
    ) -> None:
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

    def _request(self, op: str, **extra: object) -> dict[str, Any]:
        return {"op": op, "host": host_fields(self.endpoint), "accept_new": self._accept_new, **extra}

    def direct(self) -> Transport:
        with self._lock:
            if self._direct is None:
                from pippa_ops.transport.ssh import SSHTransport  # paramiko: only without a keeper

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
        request = self._request("exec", command=line, ahead=line == self._agent_line())
        conn = _open(request, self.endpoint, ahead=self._agent_line())
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
                _raise_typed(wire.parse_json(got[1]))
        return None

    def run(
        self,
        command: Command,
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> CommandResult:
        return run_started(self.name, self.start, command, input=input, timeout=timeout, check=check)

    def home(self) -> str:
        if self._home is None:
            answer = None
            if self._direct is None:
                answer = _ask(self._request("home"), ANSWER_WAIT_S, self.endpoint)
            self._home = str(answer["home"]) if answer else self.direct().home()
        return self._home

    def close(self) -> None:
        """Like closing an SSH connection: every command still relayed loses its channel."""
        for proc in list(self._procs):
            proc.close()
        if self._direct is not None:
            self._direct.close()


# -- ~/.ssh/config, read by the keeper ----------------------------------------------------------------
class KeptSSHConfig:
    """~/.ssh/config as the keeper's paramiko reads it: the two calls the inventory makes."""

    def __init__(self, hostnames: list[str], lookups: dict[str, dict[str, Any]]) -> None:
        self._hostnames = set(hostnames)
        self._lookups = lookups
        self._local: Any = None

    def get_hostnames(self) -> set[str]:
        return set(self._hostnames)

    def lookup(self, hostname: str) -> dict[str, Any]:
        if hostname not in self._lookups:
            answer = _ask({"op": "ssh_lookup", "name": hostname}, ACK_WAIT_S * 5)
            if answer is None:  # the keeper went away meanwhile: read the file here
                if self._local is None:
                    from pippa_ops.transport.sshconfig import read_ssh_config

                    self._local = read_ssh_config()
                return dict(self._local.lookup(hostname))
            self._lookups[hostname] = answer["lookup"]
        return dict(self._lookups[hostname])


def kept_ssh_config(addresses: tuple[str, ...] = ()) -> KeptSSHConfig | None:
    """~/.ssh/config from the keeper (no paramiko import here), or None without a keeper; the
    lookups of ``addresses`` come in the same answer."""
    if not reuse_enabled():
        return None
    path = ssh_config_path()
    try:
        st = os.stat(path)
        stamp: tuple[object, ...] = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (str(path), None)
    cached = _config_cache.get(stamp)
    if cached is not None:
        return cached
    answer = _ask({"op": "ssh_config", "addresses": list(addresses)}, ACK_WAIT_S * 5)
    if answer is None:
        return None
    config = KeptSSHConfig(list(answer["hostnames"]), dict(answer["lookups"]))
    _config_cache[stamp] = config
    return config


# -- the keeper process -------------------------------------------------------------------------------
def _spawn(hosts: list[dict[str, Any]], *, after_exit: bool = False) -> bool:
    """Start a keeper for this context (it exits at once if one is already starting); ``after_exit``:
    it starts once this process has ended (``after_exit``), so it costs this command's exit nothing."""
    import json
    import subprocess

    path = socket_path()
    if not wire.private_dir(path.parent, create=True):
        return False
    env = dict(os.environ)
    env.setdefault("PIPPA_INVENTORY", str(team_inventory_path()))  # the same team file, from any cwd
    here = str(Path(__file__).resolve().parent.parent.parent)  # this checkout, not another install
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        log = os.open(path.with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        argv = [sys.executable, "-m", "pippa_ops.transport.keeper", str(path)]
        if after_exit:
            from pippa_ops.transport import after_exit as after

            argv = after.command(os.getpid(), argv)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
            env=env,
            start_new_session=True,  # not ended by this terminal's Ctrl-C or hangup
        )
    except OSError:
        return False
    finally:
        os.close(log)
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write("".join(json.dumps(h) + "\n" for h in hosts).encode())
        proc.stdin.close()
    _broken.discard(path)
    return True


def _spawn_at_exit() -> None:
    with _lock:
        hosts = list(_prefetch.values())
        _prefetch.clear()
    if hosts and reuse_enabled():
        with contextlib.suppress(Exception):  # never a failure of the command that just ran
            _spawn(hosts, after_exit=True)


def start(wait_s: float = 10.0) -> int | None:
    """Start the keeper now and wait until it answers; its pid (None: it could not start)."""
    answer = _ask({"op": "ping"}, ACK_WAIT_S)
    if answer is None and _spawn([]):
        deadline = time.monotonic() + wait_s
        while answer is None and time.monotonic() < deadline:
            time.sleep(0.05)
            _broken.discard(socket_path())
            answer = _ask({"op": "ping"}, ACK_WAIT_S)
    return int(answer["pid"]) if answer else None


def status() -> dict[str, Any] | None:
    """What the keeper holds (pid, hosts with their connections and commands); None: no keeper."""
    return _ask({"op": "status"}, ACK_WAIT_S)


def disconnect() -> int | None:
    """Close every kept connection and end the keeper: how many connections it had (None: none ran).

    A keeper that does not answer (stopped, wedged) is ended by the pid in its lock file."""
    path = socket_path()
    _broken.discard(path)
    answer = _ask({"op": "shutdown"}, ACK_WAIT_S)
    if answer is not None:
        return int(answer.get("closed", 0))
    pid = _stuck_keeper_pid(path) if path.exists() else None
    if pid is None:
        return None
    import signal

    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return 0


def _stuck_keeper_pid(path: Path) -> int | None:
    """The pid of this context's keeper when it is ours and really a keeper (Linux: /proc)."""
    try:
        pid = int(path.with_suffix(".lock").read_text().strip() or "0")
        proc = Path(f"/proc/{pid}")
        if pid <= 0 or proc.stat().st_uid != os.getuid():
            return None
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if b"pippa_ops.transport.keeper" in cmdline and str(path).encode() in cmdline else None
