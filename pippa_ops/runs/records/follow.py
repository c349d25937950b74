"""Follow a file on a host from a byte offset, over one channel, resumable after a reconnect.

``logs -f`` and the dashboard's metrics stream both need "what was appended since byte N, as it
comes". One request to the host agent (``pippa_agent.streams.follow``) per follow streams it over a
single channel (no polling round trips). The follower counts the bytes it has handed out, so after
a dropped connection a new ``Follower(..., offset=old.offset)`` resumes exactly where the old one
stopped.

The agent ends the stream itself when the run is over (its ``end_file`` exists, or its tmux session
is gone), after one last read, and it exits when the client goes away: it watches the channel's
stdin, which reaches EOF when the client closes it, so nothing is left running on the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from pippa_contract import verbs
from pippa_ops.errors import AuthFailed, HostUnreachable
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Process, Transport, read_to_end
from pippa_ops.transport.retry import RECONNECT_BACKOFF_S, retry_delay


class Follower:
    """Yields chunks appended to a host file; ``offset`` is how far it has read (to resume)."""

    def __init__(
        self,
        transport: Transport,
        path: str,
        offset: int = 0,
        *,
        end_file: str | None = None,
        session: str | None = None,
        redact: bool = False,
    ) -> None:
        self.redact = redact  # a log shown: its secrets masked on the host (verbs.follow)
        self.transport = transport
        self.path = path
        self.offset = offset
        self.end_file = end_file
        self.session = session
        self._proc: Process | None = None
        self._stopped = False

    def chunks(self) -> Iterator[bytes]:
        """Stream until the end condition holds on the host (or forever without one)."""
        agent = agent_client.Once(self.transport)
        proc = self._proc = verbs.follow(
            agent, self.path, self.offset, self.end_file, self.session, self.redact
        )
        try:
            while True:
                data = proc.read(65536)
                if not data:
                    break
                self.offset += len(data)
                yield data
            if self._stopped:
                return
            # The agent exits 0 once the run is over (after one last read of the file); anything
            # else is a stream that broke off (connection dropped, host gone): say so, so the
            # caller can resume from ``offset``.
            try:
                status = proc.wait(10)
            except TimeoutError:
                status = -1
            if status != 0:
                where = f"{self.transport.name}: connection dropped while following {self.path}"
                raise HostUnreachable(where)
        finally:
            self.close()

    def close(self) -> None:
        """Stop following (idempotent); the host's tail stops when its stdin closes."""
        self._stopped = True
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.close_stdin()
            finally:
                proc.kill()


def read_all(transport: Transport, path: str, offset: int = 0, redact: bool = False) -> bytes:
    """The file's bytes from ``offset`` (one round trip; bytes, so offsets stay exact; ``b""`` when
    the file does not exist); ``redact``: a log shown, its secrets masked (the same length)."""
    with verbs.read(agent_client.Once(transport), path, offset, redact) as proc:
        proc.close_stdin()
        out = read_to_end(proc)
        agent_client.check_stream(transport, "read", proc, proc.wait(60))
        return out


def follow_to_end(
    connect: Callable[[], Transport],
    path: str,
    write: Callable[[bytes], None],
    notify: Callable[[str], None],
    *,
    end_file: str | None = None,
    session: str | None = None,
    backoff_s: Sequence[float] = RECONNECT_BACKOFF_S,
    redact: bool = False,
) -> Transport:
    """Follow ``path`` until the run ends, riding out dropped connections.

    A laptop that sleeps or a network that blips must not end ``pippa logs -f``: after a drop this
    reconnects with backoff (telling ``notify`` why and when) and resumes from the byte offset, so no
    output is lost or repeated. Ctrl-C is the way out. Returns the live transport (for the exit code).
    """
    offset, failures = 0, 0
    transport: Transport | None = None
    connected = False
    while True:
        follower: Follower | None = None
        try:
            if transport is None:
                try:
                    transport = connect()
                except AuthFailed as e:
                    if not connected:
                        raise
                    raise dropped_during_auth(e) from e
                connected = True
            follower = Follower(transport, path, offset, end_file=end_file, session=session, redact=redact)
            for chunk in follower.chunks():
                failures = 0
                write(chunk)
            return transport
        except HostUnreachable as e:
            if follower is not None:
                offset = follower.offset
            if transport is not None:
                transport.close()
                transport = None
            wait = retry_delay(failures, backoff_s)
            failures += 1
            notify(f"{e}; reconnecting in {wait:g}s (the run goes on; Ctrl-C stops following)")
            time.sleep(wait)


def dropped_during_auth(e: AuthFailed) -> HostUnreachable:
    """A reconnect to a host whose key was accepted minutes ago that "fails authentication": a
    connection that dies during authentication (a host going away mid-handshake) can read as an auth
    failure, so a follower treats it as a drop and retries with backoff, saying so; a key really
    refused on the first connect still ends the command."""
    return HostUnreachable(str(e))
