"""The command side of the connection keeper (``transport.keeper``): a ``KeeperClient`` reaches it,
asks it typed requests (``keeper.ops``), relays commands through it (``keeper.process``), and starts it.

Reuse is off for a library caller and on for the CLI (``reuse.configure``), unless ``--no-reuse`` or
``PIPPA_NO_REUSE=1``. The process's client is owned by its composition root (``reuse.keeper``); tests
and benches may hold several. A ``KeeperTransport`` never fails because of the keeper: when the keeper
is absent, stale (a socket nobody listens on) or broken (no ``A`` within ``ACK_WAIT_S``, a foreign
peer, garbage), it connects directly, as before. An absent keeper is started when the command exits
(so a cold command costs what it did before) and connects at once to the hosts that command used, so
the next command finds them warm.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pippa_contract.errors import ErrorKind
from pippa_ops import errors
from pippa_ops.repo import team_inventory_path
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.keeper import ops, wire
from pippa_ops.transport.keeper.process import ANSWER_WAIT_S, KILL_WAIT_S, KeeperProcess, KeeperTransport
from pippa_ops.transport.keeper.wire import Conn
from pippa_ops.transport.sshconfig import ssh_config_path

__all__ = [
    "ACK_WAIT_S",
    "ANSWER_WAIT_S",
    "KILL_WAIT_S",
    "KeeperClient",
    "KeeperProcess",
    "KeeperTransport",
    "KeptSSHConfig",
    "socket_path",
]

ACK_WAIT_S = 2.0  # a live keeper answers A at once; a stopped or wedged one is given up after this


def socket_path() -> Path:
    return wire.socket_path(wire.context(str(team_inventory_path())))


class KeeperClient:
    """This process's way to the keeper of its context, and what it learnt about it: keepers found
    unusable (straight to direct), hosts to prefetch in a keeper started at exit, ssh_config answers."""

    def __init__(
        self,
        *,
        spawn: bool = True,
        may_spawn: Callable[[], bool] = lambda: True,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        self.spawn_at_exit = spawn
        # Asked at each use, from the composition root (``transport.reuse``): whether an absent keeper
        # may be started at exit (the CLI's switch), and whether reuse is on at all (PIPPA_NO_REUSE).
        self._may_spawn = may_spawn
        self._enabled = enabled
        self._lock = threading.Lock()
        self._broken: set[Path] = set()
        self._prefetch: dict[str, dict[str, Any]] = {}
        self._config_cache: dict[tuple[object, ...], KeptSSHConfig] = {}
        self._atexit = False

    def forget(self) -> None:
        """Drop what this client learnt (broken keepers, cached answers): tests, benches."""
        with self._lock:
            self._broken.clear()
            self._prefetch.clear()
            self._config_cache.clear()

    def transport(self, endpoint: Endpoint, *, accept_new: bool = False) -> KeeperTransport:
        return KeeperTransport(endpoint, self, accept_new=accept_new)

    # -------------------------------------------------------------------------------- connections
    def _absent(self, ep: Endpoint | None, ahead: str | None) -> None:
        """No keeper: remember the host, and start one when this process exits (the CLI only)."""
        if ep is None or not self.spawn_at_exit or not self._may_spawn():
            return
        with self._lock:
            self._prefetch[ep.name] = {**ep.as_json(), "ahead": ahead}
            first, self._atexit = not self._atexit, True
        if first:
            atexit.register(self._spawn_at_exit)

    def open(self, request: ops.Op, ep: Endpoint | None = None, ahead: str | None = None) -> Conn | None:
        """A connection to the keeper that has acknowledged ``request``; None: go direct."""
        path = socket_path()
        if path in self._broken:
            return None
        if not wire.private_dir(path.parent, create=False):
            if not path.parent.exists():
                self._absent(ep, ahead)
            return None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._absent(ep, ahead)
            return None
        except OSError:
            return None
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            self._broken.add(path)
            return None
        try:
            sock = wire.connect(path, ACK_WAIT_S)
        except (ConnectionRefusedError, FileNotFoundError):  # a stale socket: its keeper is gone
            self._absent(ep, ahead)
            return None
        except OSError:
            self._broken.add(path)
            return None
        if not wire.peer_is_me(sock):
            sock.close()
            self._broken.add(path)
            return None
        conn = Conn(sock)
        try:
            conn.send(wire.json_frame(wire.REQUEST, request.to_json()))
            got = conn.reader.next(time.monotonic() + ACK_WAIT_S)
        except (OSError, TimeoutError, wire.ProtocolError):
            got = None
        if got is None or got[0] != wire.ACK:
            conn.close()
            self._broken.add(path)
            return None
        return conn

    @staticmethod
    def raise_typed(answer: dict[str, Any]) -> None:
        """Re-raise the keeper's typed error (host unreachable, key changed, ...) as this process's own."""
        kind, message = ErrorKind.parse(answer.get("error")), str(answer.get("message", ""))
        cls = errors.error_class(kind, Exception)
        if cls is not Exception:
            raise cls(message)
        # "internal" or unknown: the keeper could not do it; the caller goes direct

    def ask(self, request: ops.Op, wait_s: float, ep: Endpoint | None = None) -> dict[str, Any] | None:
        """One request and its JSON answer; None when the keeper cannot answer (go direct)."""
        conn = self.open(request, ep)
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
            self.raise_typed(answer)
            return None
        return answer if kind == wire.ANSWER else None

    # ------------------------------------------------------------------------------ ~/.ssh/config
    def ssh_config(self, addresses: tuple[str, ...] = ()) -> KeptSSHConfig | None:
        """~/.ssh/config from the keeper (no asyncssh import here), or None without a keeper; the
        lookups of ``addresses`` come in the same answer."""
        if not self._enabled():
            return None
        path = ssh_config_path()
        try:
            st = os.stat(path)
            stamp: tuple[object, ...] = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (str(path), None)
        cached = self._config_cache.get(stamp)
        if cached is not None:
            return cached
        answer = self.ask(ops.SshConfig(tuple(addresses)), ACK_WAIT_S * 5)
        if answer is None:
            return None
        config = KeptSSHConfig(self, list(answer["hostnames"]), dict(answer["lookups"]))
        self._config_cache[stamp] = config
        return config

    # ------------------------------------------------------------------------------ the keeper
    def _spawn_at_exit(self) -> None:
        with self._lock:
            hosts = list(self._prefetch.values())
            self._prefetch.clear()
        if hosts and self._enabled():
            with contextlib.suppress(Exception):  # never a failure of the command that just ran
                if _spawn(hosts, after_exit=True):
                    self._broken.discard(socket_path())

    def start(self, wait_s: float = 10.0) -> int | None:
        """Start the keeper now and wait until it answers; its pid (None: it could not start)."""
        answer = self.ask(ops.Ping(), ACK_WAIT_S)
        if answer is None and _spawn([]):
            deadline = time.monotonic() + wait_s
            while answer is None and time.monotonic() < deadline:
                time.sleep(0.05)
                self._broken.discard(socket_path())
                answer = self.ask(ops.Ping(), ACK_WAIT_S)
        return int(answer["pid"]) if answer else None

    def status(self) -> dict[str, Any] | None:
        """What the keeper holds (pid, hosts with their connections and commands); None: no keeper."""
        return self.ask(ops.Status(), ACK_WAIT_S)

    def disconnect(self) -> int | None:
        """Close every kept connection and end the keeper: how many connections it had (None: none
        ran). A keeper that does not answer (stopped, wedged) is ended by the pid in its lock file."""
        path = socket_path()
        self._broken.discard(path)
        answer = self.ask(ops.Shutdown(), ACK_WAIT_S)
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


class KeptSSHConfig:
    """~/.ssh/config as the keeper reads it: the two calls the inventory makes."""

    def __init__(
        self, client: KeeperClient, hostnames: list[str], lookups: dict[str, dict[str, Any]]
    ) -> None:
        self._client = client
        self._hostnames = set(hostnames)
        self._lookups = lookups
        self._local: Any = None

    def get_hostnames(self) -> set[str]:
        return set(self._hostnames)

    def lookup(self, hostname: str) -> dict[str, Any]:
        if hostname not in self._lookups:
            answer = self._client.ask(ops.SshLookup(hostname), ACK_WAIT_S * 5)
            if answer is None:  # the keeper went away meanwhile: read the file here
                if self._local is None:
                    from pippa_ops.transport.sshconfig import read_ssh_config

                    self._local = read_ssh_config()
                return dict(self._local.lookup(hostname))
            self._lookups[hostname] = answer["lookup"]
        return dict(self._lookups[hostname])


# -- starting the keeper process ------------------------------------------------------------------------
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
    return True


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
