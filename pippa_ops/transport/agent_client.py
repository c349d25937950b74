"""The laptop side of the host agent (``pippa_agent``): start it, ask it things, read the answers.

Every agent process is started by ONE fixed command on the host, quoted once:
``python3 -S -I -c BOOTSTRAP``, where BOOTSTRAP (``pippa_agent/bootstrap.py``) names the sha256 of
this version of the agent bundle (``agent_bundle``). No argument of a request reaches a shell;
requests are framed JSON on stdin (``pippa_contract.verbs`` are the typed calls). The host needs
only python3 >= 3.8 (``pippa up`` says so).

Start-up is most of what an operation costs on the host, so:
- the bundle is cached on the host, compiled: ``~/.cache/pippa/agent-<sha256>-<python tag>.code``,
  used only when no other user could have written it (see the bootstrap); ``+`` means cached, ``?``
  asks for the bundle, which is sent once;
- one ``Session`` keeps one agent process for several requests (a sync's listing then its marker,
  a launch's listing then its start): one Python start-up and one channel instead of several.
"""

from __future__ import annotations

import contextlib
import json
import time
from types import TracebackType
from typing import Any

from pippa_contract import wire
from pippa_contract.errors import ErrorKind
from pippa_ops.errors import HostUnreachable, RemoteCommandFailed, ToolMissing, error_class
from pippa_ops.transport import agent_bundle
from pippa_ops.transport.base import Process, Transport
from pippa_ops.transport.shell import join

__all__ = ["Once", "Session", "call", "check_stream", "command", "parse_answer", "start"]

digest, program, bootstrap = agent_bundle.digest, agent_bundle.program, agent_bundle.bootstrap
frame = wire.frame


def command(transport: Transport) -> str:
    """The one shell line that starts the agent (the same for every verb)."""
    return join([transport.agent_python, "-S", "-I", "-c", bootstrap()])


def _failed(transport: Transport, status: int, stderr: str, verb: str) -> Exception:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "no output"
    if status == 127 or "pippa needs python3" in stderr:
        return ToolMissing(
            f"{transport.name}: the host needs python3 >= 3.8 on its PATH for pippa's agent: {last}"
        )
    return RemoteCommandFailed(f"{transport.name}: {verb} failed on the host (exit {status}): {last}")


def parse_answer(transport: Transport, verb: str, line: bytes) -> dict[str, Any]:
    """The agent's JSON answer; its expected failures become the matching typed errors."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise RemoteCommandFailed(f"{transport.name}: {verb}: the host agent gave no answer") from e
    if not isinstance(data, dict):
        raise RemoteCommandFailed(f"{transport.name}: {verb}: unexpected answer from the host agent")
    if "error" in data:
        kind = error_class(ErrorKind.parse(data["error"]), RemoteCommandFailed)
        raise kind(f"{transport.name}: {data.get('message', data['error'])}")
    return data


def _ended(transport: Transport, proc: Process, verb: str) -> Exception:
    """The error for an agent that ended without answering: its exit status and last stderr line,
    or HostUnreachable when the connection went away under it (a caller that rides out drops, as
    ``pippa wait`` and ``logs -f`` do, then reconnects)."""
    with contextlib.suppress(OSError):
        proc.close_stdin()
    try:
        status = proc.wait(10)
    except TimeoutError:
        status = -1
    proc.kill()
    if status == -1 and proc.connection_lost():
        return HostUnreachable(
            f"{transport.name}: lost the SSH connection before the host agent answered ({verb})"
        )
    return _failed(transport, status, proc.stderr_text(), verb)


class Session:
    """One agent process on the host answering requests in turn, started by the first one.

    ``call`` asks a JSON verb; ``stream`` hands the process over to a verb that owns the rest of
    its stdin/stdout (the next request starts a new process). Not thread-safe: one caller at a time.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._proc: Process | None = None

    def _send(self, verb: str, args: dict[str, Any], timeout: float) -> Process:
        data = frame(json.dumps({"verb": verb, "args": args}).encode())
        proc = self._proc
        if proc is not None:
            try:
                proc.write(data)
            except OSError:
                self._proc = None
                raise _ended(self.transport, proc, verb) from None
            return proc
        proc = self.transport.start(command(self.transport))
        try:
            proc.set_deadline(time.monotonic() + timeout)
            proc.write(data)  # the first request travels while the host starts python
            status = proc.read(1)
            if status == b"?":  # not cached there yet: the program, once
                proc.write(frame(program()))
            elif status != b"+":
                raise _ended(self.transport, proc, verb)
        except OSError:
            raise _ended(self.transport, proc, verb) from None
        except BaseException:
            proc.kill()
            raise
        self._proc = proc
        return proc

    def call(self, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """One request and its JSON answer."""
        proc = self._send(verb, args, timeout)
        proc.set_deadline(time.monotonic() + timeout)
        try:
            line = proc.readline()
        except TimeoutError as e:
            self._proc = None
            proc.kill()
            raise TimeoutError(f"{self.transport.name}: {verb} timed out after {timeout}s") from e
        except BaseException:  # an answer not read: this agent is never released for reuse
            self._proc = None
            proc.kill()
            raise
        if not line.endswith(b"\n"):
            self._proc = None
            raise _ended(self.transport, proc, verb)
        proc.set_deadline(None)
        return parse_answer(self.transport, verb, line)

    def stream(self, verb: str, args: dict[str, Any], timeout: float = 60) -> Process:
        """Start a verb that streams (follow, read, sync_apply); the caller owns the process."""
        proc = self._send(verb, args, timeout)
        proc.set_deadline(None)
        self._proc = None
        return proc

    def close(self) -> None:
        """Let the agent go (idempotent), having had every answer: its stdin closes and it exits on its
        own, or the keeper keeps it for the next command (``Process.release``); nothing waits the
        round trip for its exit status."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def call(transport: Transport, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """One request in an agent process of its own."""
    with Session(transport) as session:
        return session.call(verb, args, timeout)


class Once:
    """A caller for ``pippa_contract.verbs`` that asks each request in an agent process of its own
    (``Session`` keeps one process for several)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def call(self, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        return call(self.transport, verb, args, timeout)

    def stream(self, verb: str, args: dict[str, Any], timeout: float = 60) -> Process:
        return Session(self.transport).stream(verb, args, timeout)


def start(transport: Transport, verb: str, args: dict[str, Any]) -> Process:
    """Start a streaming verb (follow, read, sync_apply); its stdin stays open for the caller."""
    return Session(transport).stream(verb, args)


def check_stream(transport: Transport, verb: str, proc: Process, status: int) -> None:
    if status != 0:
        raise _failed(transport, status, proc.stderr_text(), verb)
