"""Local port forwards over the host's asyncssh connection (``pippa forward``), like ``ssh -L``.

Each forward listens on 127.0.0.1 here; every accepted connection becomes a ``direct-tcpip`` channel
to ``localhost:PORT`` as the host sees it (TensorBoard, a vLLM server), with bytes copied both ways
until either side closes. The listener stays only on loopback, so nobody else on the laptop's
network reaches the host's port. The listeners and copies run on the SSH loop (``ssh.LoopThread``),
not a thread each. Why not asyncssh's ``forward_local_port``: its listener belongs to one connection
and ends with it; here a connection that dropped is reopened by the next accepted client
(``HostConn.connection`` reconnects), and a port the host does not serve is said in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncssh

from pippa_ops.errors import PippaError, UsageError
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


async def _copy(src: asyncio.StreamReader | asyncssh.SSHReader[bytes], dst: _Writer) -> None:
    """Bytes from ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s side."""
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (OSError, asyncssh.Error):
        pass


_Writer = asyncio.StreamWriter | asyncssh.SSHWriter[bytes]


class Forwarder:
    """The listeners of one ``pippa forward``; ``close`` ends them and their connections."""

    def __init__(self, transport: SSHTransport, ports: list[PortSpec], log: Callable[[str], None]) -> None:
        self.transport = transport
        self.log = log
        self.listeners: list[tuple[PortSpec, socket.socket]] = []
        self._servers: list[asyncio.Server] = []
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

        async def serve() -> None:
            for p, s in self.listeners:
                handler = self._handler(p)
                self._servers.append(await asyncio.start_server(handler, sock=s))

        self.transport.loop.run(serve())

    def _handler(
        self, port: PortSpec
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
            try:
                conn = await self.transport.conn.connection()
                there_r, there_w = await conn.open_connection(REMOTE, port.remote, peer[0], peer[1])
            except (PippaError, asyncssh.Error, OSError) as e:
                self.log(f"{self.transport.name}: cannot open localhost:{port.remote} there: {e}")
                writer.close()
                return
            try:
                await asyncio.gather(_copy(reader, there_w), _copy(there_r, writer))
            finally:
                there_w.close()
                writer.close()

        return handle

    def close(self) -> None:
        async def closed() -> None:
            for server in self._servers:
                server.close()

        if self._servers:
            self.transport.loop.run(closed())
        for _, s in self.listeners:
            with contextlib.suppress(OSError):
                s.close()
        self.transport.close()
