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
from collections.abc import Iterator

from pippa_ops.runs_script import sh_path
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

    def chunks(self) -> Iterator[bytes]:
        """Stream until the end condition holds on the host (or forever without one)."""
        script = follow_script(self.path, self.offset, end_file=self.end_file, session=self.session)
        self._proc = self.transport.start(script)
        try:
            while True:
                data = self._proc.read(65536)
                if not data:
                    break
                self.offset += len(data)
                yield data
        finally:
            self.close()
        # The stream ended because the run ended: pick up anything tail had not yet sent.
        tail = read_all(self.transport, self.path, self.offset)
        if tail:
            self.offset += len(tail)
            yield tail

    def close(self) -> None:
        """Stop following (idempotent); the host's tail stops when its stdin closes."""
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
