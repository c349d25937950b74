"""The keeper's relay: every command's Unix-socket client spliced to its SSH channel, on the keeper's loop.

An SSH channel cannot be handed to another process, so the keeper relays it (frames in
``keeper.wire``): stdin, stdin's EOF, kill and lend-back from the client; stdout as it arrives, then
stderr and the exit status (or a lost connection) to it. Each relay is a coroutine on the keeper's
one asyncio loop, beside asyncssh's reading of every connection: no thread per command or host.
Output to a slow client is buffered up to OUT_HIGH, then the channel is no longer read (its SSH
window fills and the host's writer waits), as a direct connection would behave; stdin the channel
cannot take yet is buffered up to STDIN_HIGH, then the client is no longer read.
"""

from __future__ import annotations

import asyncio
import contextlib

from pippa_contract.errors import ErrorKind
from pippa_ops.transport.keeper import wire
from pippa_ops.transport.sshconn import Chan

OUT_HIGH = 4 << 20  # bytes buffered for a client before its channel is no longer read
STDIN_HIGH = 4 << 20  # stdin buffered for a channel before its client is no longer read
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
        return (
            self._status_seen
            and not self._broken
            and not self._skip
            and not self._head
            and self._frames - self._bundle == self._lines
        )


class Relay:
    """One command: its client (``reader``/``writer``, frames already read in ``frames``) and its channel.
    ``run`` returns whether the channel is lent back (a host agent whose client had every answer)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frames: wire.FrameReader,
        chan: Chan,
        *,
        first: bytes = b"",
        tally: Tally | None = None,
    ) -> None:
        self.reader, self.writer, self.frames, self.chan = reader, writer, frames, chan
        self.first = first  # stdout the client reads first (a lent agent's "+", as its bootstrap said)
        self.tally = tally  # a host agent's conversation (None: any other command, never lent)
        self._stdin_eof = False
        self._paused = False
        self._resuming: asyncio.Task[None] | None = None
        self._kill: asyncio.Task[None] | None = None

    async def run(self) -> bool:
        chan, writer = self.chan, self.writer
        writer.transport.set_write_buffer_limits(high=OUT_HIGH)
        if chan.channel is not None:
            chan.channel.set_write_buffer_limits(high=STDIN_HIGH)
        writer.write(wire.frame(wire.STARTED) + (wire.frame(wire.STDOUT, self.first) if self.first else b""))
        held, chan.held = bytes(chan.held), bytearray()
        chan.sink = self._stdout
        if held:
            self._stdout(held)
        end = asyncio.ensure_future(self._until_end())
        client = asyncio.ensure_future(self._from_client())
        lent = False
        try:
            await asyncio.wait({end, client}, return_when=asyncio.FIRST_COMPLETED)
            if client.done() and not end.done() and client.result():
                lent = self._lendable()
            elif end.done():
                with contextlib.suppress(OSError, asyncio.TimeoutError):
                    await writer.drain()
        finally:
            for task in (end, client, self._kill, self._resuming):
                if task is not None and not task.done():
                    task.cancel()
            chan.sink = None
            if not lent:
                chan.close()
            writer.close()
        return lent

    # ------------------------------------------------------------------------------------- client
    async def _from_client(self) -> bool:
        """Frames from the client until it lends its agent back (True) or goes (False: the channel
        closes, as on a dropped connection)."""
        try:
            while True:
                while (got := self.frames.pop()) is not None:
                    kind, payload = got
                    if kind == wire.STDIN and not self._stdin_eof:
                        await self._stdin(payload)
                    elif kind == wire.STDIN_EOF and not self._stdin_eof:
                        self._stdin_eof = True
                        self.chan.write_eof()
                    elif kind == wire.KILL and self._kill is None:
                        self._kill = asyncio.ensure_future(self._kill_chan())
                    elif kind == wire.LEND:
                        return True
                data = await self.reader.read(wire.CHUNK)
                if not data:
                    return False
                self.frames.feed(data)
        except (wire.ProtocolError, OSError):
            return False

    async def _stdin(self, data: bytes) -> None:
        if self.tally is not None:
            self.tally.stdin(data)
        self.chan.write(data)
        if self.chan.unsent() > STDIN_HIGH:
            await self.chan.writable.wait()

    def _lendable(self) -> bool:
        """The client had every answer: the agent is kept only with nothing unread and nothing ended."""
        return self.tally is not None and self.tally.at_boundary() and self._kill is None and self.chan.idle()

    # ------------------------------------------------------------------------------------ channel
    def _stdout(self, data: bytes) -> None:
        if self.tally is not None:
            self.tally.stdout(data)
        if self.writer.is_closing():
            return  # the client went: the relay ends at its next read
        self.writer.write(wire.frame(wire.STDOUT, data))
        if not self._paused and self.writer.transport.get_write_buffer_size() > OUT_HIGH:
            self._paused = True
            if self.chan.channel is not None:
                self.chan.channel.pause_reading()
            self._resuming = asyncio.ensure_future(self._resume())

    async def _resume(self) -> None:
        with contextlib.suppress(OSError):
            await self.writer.drain()
        self._paused = False
        if self.chan.channel is not None and not self.chan.closed:
            self.chan.channel.resume_reading()

    async def _until_end(self) -> None:
        """stdout's end, then stderr and the exit status (or the lost connection) to the client."""
        chan = self.chan
        await chan.until(lambda: chan.eof or chan.closed)
        self.writer.write(wire.frame(wire.STDOUT))  # stdout ended (the command may still run)
        await chan.until(lambda: chan.closed or chan.status is not None)
        out = wire.frame(wire.STDERR, bytes(chan.err))
        if chan.status is None and chan.lost:  # no exit status: the link went, say so
            out += error_frame(ErrorKind.HOST_UNREACHABLE, "lost the SSH connection")
        else:
            out += wire.frame(wire.EXIT, wire.status_payload(-1 if chan.status is None else chan.status))
        self.writer.write(out)

    async def _kill_chan(self) -> None:
        """KILL the command (sent again a few times), then close the channel."""
        chan = self.chan

        def gone() -> bool:
            return chan.closed or chan.status is not None

        for _ in range(KILL_TRIES - 1):
            if gone() or not chan.signal("KILL"):
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(chan.until(gone), KILL_EVERY_S)
        chan.close()
