"""Local port forwards over the host's one paramiko connection (``pippa forward``), like ``ssh -L``.

Each forward listens on 127.0.0.1 here; every accepted connection becomes a ``direct-tcpip`` channel
to ``localhost:PORT`` as the host sees it (TensorBoard, a vLLM server), with bytes pumped both ways
until either side closes. The listener stays only on loopback, so nobody else on the laptop's
network reaches the host's port. A connection that dropped is reopened by the next accepted client
(``SSHTransport.connection`` reconnects).
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pippa_ops.errors import PippaError, UsageError
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.ready import readable
from pippa_ops.transport.ssh import SSHTransport

LISTEN = "127.0.0.1"
REMOTE = "localhost"  # resolved by the host's sshd, as `ssh -L PORT:localhost:PORT` does


@dataclass(frozen=True)
class PortSpec:
    remote: int
    local: int  # 0: any free port (the bound one is reported)


def parse_port_spec(text: str) -> PortSpec:
    """``PORT`` (the same port here) or ``PORT:LOCALPORT``: the host's port first, as in the CLI."""
    m = re.fullmatch(r"(\d{1,5})(?::(\d{1,5}))?", text.strip())
    if not m:
        raise UsageError(f"bad port {text!r}: use PORT or PORT:LOCALPORT (e.g. 6006 or 8000:18000)")
    remote = int(m.group(1))
    local = int(m.group(2)) if m.group(2) is not None else remote
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        raise UsageError(f"bad port {text!r}: ports are 1-65535 (a local port of 0 picks a free one)")
    return PortSpec(remote, local)


def _pump(sock: socket.socket, chan: paramiko.Channel) -> None:
    """Copy bytes both ways until one side closes, then close both."""
    both: list[Any] = [sock, chan]  # a paramiko Channel has fileno(): poll waits on it
    try:
        while True:
            ready = readable(both, 1.0)
            if sock in ready:
                data = sock.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in ready:
                data = chan.recv(65536)
                if not data:
                    break
                sock.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
        chan.close()
        sock.close()


class Forwarder:
    """The listeners of one ``pippa forward``; ``close`` ends them and their connections."""

    def __init__(self, transport: SSHTransport, ports: list[PortSpec], log: Callable[[str], None]) -> None:
        self.transport = transport
        self.log = log
        self._closed = threading.Event()
        self.listeners: list[tuple[PortSpec, socket.socket]] = []
        try:
            for p in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((LISTEN, p.local))
                except OSError as e:
                    s.close()
                    raise UsageError(f"cannot listen on {LISTEN}:{p.local}: {e.strerror or e}") from e
                s.listen(16)
                self.listeners.append((p, s))
        except BaseException:
            self.close()
            raise

    def bound(self) -> list[tuple[int, int]]:
        """(local port, host port) of each listener: the local one as bound (0 became a real port)."""
        return [(s.getsockname()[1], p.remote) for p, s in self.listeners]

    def start(self) -> None:
        self.transport.connection()  # connect now: a bad host fails here, not at the first client
        for p, s in self.listeners:
            threading.Thread(target=self._accept, args=(p, s), daemon=True).start()

    def _accept(self, port: PortSpec, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._open, args=(port, sock, peer), daemon=True).start()

    def _open(self, port: PortSpec, sock: socket.socket, peer: tuple[str, int]) -> None:
        try:
            chan = self.transport.connection().open_channel(
                "direct-tcpip", (REMOTE, port.remote), peer, timeout=10
            )
        except (PippaError, paramiko.SSHException, OSError, EOFError) as e:
            self.log(f"{self.transport.name}: cannot open localhost:{port.remote} there: {e}")
            sock.close()
            return
        _pump(sock, chan)

    def close(self) -> None:
        self._closed.set()
        for _, s in self.listeners:
            s.close()
        self.transport.close()
