"""Follow a file on a host from a byte offset, over one channel, resumable after a reconnect.

``logs -f`` and the dashboard's metrics stream both need "what was appended since byte N, as it
comes". One remote ``tail -c +N -F`` per follow streams it over a single channel (no polling round
trips). The follower counts the bytes it has handed out, so after a dropped connection a new
``Follower(..., offset=old.offset)`` resumes exactly where the old one stopped.

The remote side ends the stream itself when the run is over (its ``end_file`` exists, or its tmux
session is gone), and it stops tail when the client goes away: a watcher reads the channel's stdin,
which reaches EOF when the client closes it, so no tail is left running on the host.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator, Sequence

from pippa_ops.errors import HostUnreachable
from pippa_ops.shell import sh_path
from pippa_ops.tmux import target
from pippa_ops.transport import Process, Transport


def follow_script(
    path: str, offset: int, *, end_file: str | None = None, session: str | None = None, poll_s: float = 0.5
) -> str:
    """The remote command: stream ``path`` from byte ``offset`` until the end condition holds."""
    conds = []
    if end_file is not None:
        conds.append(f"[ -e {sh_path(end_file)} ]")
    if session is not None:
        conds.append(f"! tmux has-session -t {shlex.quote(target(session))} 2>/dev/null")
    end = " || ".join(conds) if conds else "false"
    return (
        "exec 3<&0\n"
        f"tail -c +{int(offset) + 1} -F {sh_path(path)} 2>/dev/null & t=$!\n"
        "{ cat <&3 >/dev/null; kill $t 2>/dev/null; } >/dev/null 2>&1 &\n"
        f"while kill -0 $t 2>/dev/null; do\n"
        f"  if {end}; then sleep {poll_s * 2:g}; kill $t 2>/dev/null; break; fi\n"
        f"  sleep {poll_s:g}\ndone\n"
        "wait $t 2>/dev/null; exit 0"
    )


def read_from_script(path: str, offset: int) -> str:
    """Everything in ``path`` after byte ``offset`` (the catch-up read after the stream ends)."""
    return f"tail -c +{int(offset) + 1} {sh_path(path)} 2>/dev/null; exit 0"


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
    ) -> None:
        self.transport = transport
        self.path = path
        self.offset = offset
        self.end_file = end_file
        self.session = session
        self._proc: Process | None = None
        self._stopped = False

    def chunks(self) -> Iterator[bytes]:
        """Stream until the end condition holds on the host (or forever without one)."""
        script = follow_script(self.path, self.offset, end_file=self.end_file, session=self.session)
        proc = self._proc = self.transport.start(script)
        try:
            while True:
                data = proc.read(65536)
                if not data:
                    break
                self.offset += len(data)
                yield data
            if self._stopped:
                return
            # The script exits 0 once the run is over; anything else is a stream that broke off
            # (connection dropped, host gone): say so, so the caller can resume from ``offset``.
            try:
                status = proc.wait(10)
            except TimeoutError:
                status = -1
            if status != 0:
                where = f"{self.transport.name}: connection dropped while following {self.path}"
                raise HostUnreachable(where)
        finally:
            self.close()
        # The stream ended because the run ended: pick up anything tail had not yet sent.
        tail = read_all(self.transport, self.path, self.offset)
        if tail:
            self.offset += len(tail)
            yield tail

    def close(self) -> None:
        """Stop following (idempotent); the host's tail stops when its stdin closes."""
        self._stopped = True
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.close_stdin()
            finally:
                proc.kill()


def read_all(transport: Transport, path: str, offset: int = 0) -> bytes:
    """The file's bytes from ``offset`` (one command; bytes, so offsets stay exact)."""
    with transport.start(read_from_script(path, offset)) as proc:
        proc.close_stdin()
        out = bytearray()
        while True:
            data = proc.read(65536)
            if not data:
                break
            out += data
        proc.wait(60)
        return bytes(out)


def follow_to_end(
    connect: Callable[[], Transport],
    path: str,
    write: Callable[[bytes], None],
    notify: Callable[[str], None],
    *,
    end_file: str | None = None,
    session: str | None = None,
    backoff_s: Sequence[float] = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0),
) -> Transport:
    """Follow ``path`` until the run ends, riding out dropped connections.

    A laptop that sleeps or a network that blips must not end ``pippa logs -f``: after a drop this
    reconnects with backoff (telling ``notify`` why and when) and resumes from the byte offset, so no
    output is lost or repeated. Ctrl-C is the way out. Returns the live transport (for the exit code).
    """
    offset, failures = 0, 0
    transport: Transport | None = None
    while True:
        follower: Follower | None = None
        try:
            if transport is None:
                transport = connect()
            follower = Follower(transport, path, offset, end_file=end_file, session=session)
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
            wait = backoff_s[min(failures, len(backoff_s) - 1)]
            failures += 1
            notify(f"{e}; reconnecting in {wait:g}s (the run goes on; Ctrl-C stops following)")
            time.sleep(wait)
