"""One interface for running commands on a host, whether over SSH or on this machine.

Everything above the transport (sync, tmux, runs, gpus, the dashboard) talks to a ``Transport`` and
never knows which one it has; the host ``local`` gets ``LocalTransport``, every other host the
asyncssh-backed ``SSHTransport`` in ``pippa_ops.transport.ssh``.

Results are values (``CommandResult``); raising on a non-zero exit is the caller's choice (``check``).
A command given as a string is a shell line the caller built with ``pippa_ops.transport.shell``; a sequence is
an argument list quoted here, once.
"""

from __future__ import annotations

import abc
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import cast

from pippa_ops.errors import RemoteCommandFailed
from pippa_ops.transport.ready import readable
from pippa_ops.transport.shell import join

Command = str | Sequence[str]
CONNECT_TIMEOUT_S = 10.0  # TCP connect, SSH banner, authentication, channel open: each


def as_shell_line(command: Command) -> str:
    return command if isinstance(command, str) else join(command)


@dataclass(frozen=True)
class CommandResult:
    """What one command did on one host."""

    host: str
    command: str  # the shell line as sent
    exit_status: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self) -> CommandResult:
        if not self.ok:
            detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
            last = detail[-1] if detail else "no output"
            raise RemoteCommandFailed(
                f"{self.host}: command failed with exit status {self.exit_status}: {last}"
            )
        return self


def finish(
    host: str, line: str, exit_status: int, stdout: bytes, stderr: str, started: float, check: bool
) -> CommandResult:
    """The record of a command that ran since ``started`` (monotonic); raising is ``check``'s call."""
    result = CommandResult(
        host=host,
        command=line,
        exit_status=exit_status,
        stdout=stdout.decode(errors="replace"),
        stderr=stderr,
        elapsed_s=time.monotonic() - started,
    )
    return result.check() if check else result


class Process(abc.ABC):
    """A command started on a host whose stdout streams back (tar for sync, nvidia-smi -l, tail -f).

    Subclasses give one raw read (``_read_raw``); ``read`` and ``readline`` share one read buffer on
    top of it, so a line reader pulls blocks (not one byte per call) and mixing the two loses no byte.
    A deadline (``set_deadline``) makes a stalled read raise TimeoutError instead of blocking forever.
    """

    def __init__(self) -> None:
        self._rbuf = bytearray()
        self._deadline: float | None = None

    @abc.abstractmethod
    def _read_raw(self, n: int) -> bytes:
        """One read of up to ``n`` bytes from the stream (``b""`` at its end) before the deadline."""

    def set_deadline(self, deadline: float | None) -> None:
        """Make reads raise TimeoutError when ``deadline`` (``time.monotonic()``) passes first."""
        self._deadline = deadline

    def _time_left(self) -> float | None:
        """Seconds until the deadline (None: no deadline); TimeoutError once it has passed."""
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("read timed out")
        return left

    def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes of stdout; ``b""`` at end of stream."""
        if self._rbuf:
            out = bytes(self._rbuf[:n])
            del self._rbuf[:n]
            return out
        return self._read_raw(n)

    def readline(self, limit: int | None = None) -> bytes:
        """One line of stdout including its newline; ``b""`` at end of stream. ``limit``: a line
        longer than that raises ValueError (a peer's line cannot grow this process's memory)."""
        start = 0
        while (end := self._rbuf.find(b"\n", start)) < 0:
            if limit is not None and len(self._rbuf) > limit:
                raise ValueError(f"a line longer than {limit} bytes")
            start = len(self._rbuf)
            chunk = self._read_raw(65536)
            if not chunk:
                line = bytes(self._rbuf)
                self._rbuf.clear()
                return line
            self._rbuf += chunk
        line = bytes(self._rbuf[: end + 1])
        del self._rbuf[: end + 1]
        return line

    def fileno(self) -> int | None:
        """A descriptor that reads ready when ``read_nowait`` may have bytes (an event loop waits on
        it instead of a thread blocking in ``read``); None: this process has none."""
        return None

    def read_nowait(self, n: int = 65536) -> bytes | None:
        """Up to ``n`` bytes of stdout that are here already; None: none yet (wait on ``fileno``);
        ``b""`` at end of stream. Never blocks."""
        if self._rbuf:
            return self.read(n)
        return self._read_nowait_raw(n)

    def _read_nowait_raw(self, n: int) -> bytes | None:
        fd = self.fileno()
        return None if fd is None or not readable([fd], 0) else self._read_raw(n)

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send bytes to the command's stdin."""

    @abc.abstractmethod
    def close_stdin(self) -> None: ...

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> int:
        """Exit status; raises TimeoutError when ``timeout`` passes first."""

    @abc.abstractmethod
    def stderr_text(self) -> str:
        """What the command wrote to stderr (call after ``wait``)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop the command (idempotent; safe from another thread: a blocked read then ends)."""

    def close(self) -> None:
        """Let go of a command that has done its work and whose stdin is closed, without waiting
        for its exit status (over SSH that is a round trip): it ends on its own. Here: ``kill``."""
        self.kill()

    def release(self) -> None:
        """Done with a host agent that answered every request asked of it: its stdin closes and it
        exits (``close``). A relayed one may instead be kept by the keeper for the next command."""
        try:
            self.close_stdin()
        except OSError:
            pass
        finally:
            self.close()

    def connection_lost(self) -> bool:
        """Whether the command ended because the connection to its host went away (then it has no
        exit status: ``wait`` gives -1), not by itself. A local command has no connection."""
        return False

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def read_to_end(proc: Process) -> bytes:
    """Everything the process writes to stdout from here to its end (the one read-until-EOF loop)."""
    out = bytearray()
    while chunk := proc.read():
        out += chunk
    return bytes(out)


def run_started(
    name: str,
    start: Callable[[str], Process],
    command: Command,
    *,
    input: bytes | None,
    timeout: float | None,
    check: bool,
) -> CommandResult:
    """``Transport.run`` on top of ``start``: stdin fed from a thread (so a command that writes while
    it reads never deadlocks), stdout read to its end, the exit status, all before ``timeout``."""
    line = as_shell_line(command)
    t0 = time.monotonic()
    proc = start(line)
    try:
        if input:
            writer = threading.Thread(target=_feed, args=(proc, input), daemon=True)
            writer.start()
        else:
            proc.close_stdin()
        deadline = None if timeout is None else t0 + timeout
        proc.set_deadline(deadline)
        out = read_to_end(proc)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        status = proc.wait(remaining)
    except TimeoutError as e:
        proc.kill()
        raise TimeoutError(f"{name}: command timed out after {timeout}s") from e
    finally:
        proc.kill()  # the command has ended: this only closes its channel
    return finish(name, line, status, out, proc.stderr_text(), t0, check)


def _feed(proc: Process, data: bytes) -> None:
    try:
        proc.write(data)
        proc.close_stdin()
    except OSError:
        pass  # the command ended without reading all its input; its exit status tells


class Transport(abc.ABC):
    """Runs commands on one host. Connections open lazily and close idempotently."""

    name: str
    is_local: bool = False
    agent_python: str = "python3"  # what runs the host agent (pippa_agent, through agent_client)

    def run(
        self,
        command: Command,
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> CommandResult:
        """The command to its end, through ``start`` (``run_started``)."""
        return run_started(self.name, self.start, command, input=input, timeout=timeout, check=check)

    @abc.abstractmethod
    def start(self, command: Command) -> Process:
        """Start a command whose stdout is read as it comes (and whose stdin may be written)."""

    @abc.abstractmethod
    def home(self) -> str:
        """The absolute home directory of the user on the host (cached)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def expand(self, path: str) -> str:
        """Turn ``~/x`` into an absolute path on the host (remote paths are then quoted safely)."""
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return self.home().rstrip("/") + "/" + path[2:]
        return path

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _LocalProcess(Process):
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self._p = popen
        self._stderr = b""

    def _read_raw(self, n: int) -> bytes:
        out = self._p.stdout
        assert out is not None
        try:
            left = self._time_left()
            if left is not None and not readable([out], left):
                raise TimeoutError("read timed out")
            # The raw pipe: one os.read, so the wait never misses bytes parked in a Python buffer.
            return cast(io.BufferedReader, out).raw.read(n) or b""
        except (ValueError, OSError):
            if out.closed:  # kill() from another thread closed the pipe (EBADF mid-wait): ended
                return b""
            raise

    def fileno(self) -> int | None:
        out = self._p.stdout
        return None if out is None or out.closed else out.fileno()

    def write(self, data: bytes) -> None:
        assert self._p.stdin is not None
        self._p.stdin.write(data)
        self._p.stdin.flush()  # a request must reach the agent now, not when a buffer fills

    def close_stdin(self) -> None:
        if self._p.stdin is not None and not self._p.stdin.closed:
            self._p.stdin.close()

    def wait(self, timeout: float | None = None) -> int:
        try:
            code = self._p.wait(timeout)
        except subprocess.TimeoutExpired as e:
            raise TimeoutError(str(e)) from e
        if self._p.stderr is not None and not self._p.stderr.closed:
            self._stderr = self._p.stderr.read()
        return code

    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")

    def kill(self) -> None:
        if self._p.poll() is None:
            self._p.kill()
            self._p.wait()
        for f in (self._p.stdin, self._p.stdout, self._p.stderr):
            if f is not None and not f.closed:
                f.close()


class LocalTransport(Transport):
    """The host ``local``: the same commands, run on this machine through ``sh -c``."""

    is_local = True

    def __init__(self, name: str = "local") -> None:
        self.name = name
        self.agent_python = sys.executable

    def run(
        self,
        command: Command,
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> CommandResult:
        line = as_shell_line(command)
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                ["sh", "-c", line],
                input=input,
                capture_output=True,
                timeout=timeout,
                cwd=self.home(),
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise TimeoutError(f"{self.name}: command timed out after {timeout}s") from e
        return finish(self.name, line, p.returncode, p.stdout, p.stderr.decode(errors="replace"), t0, check)

    def start(self, command: Command) -> Process:
        popen = subprocess.Popen(
            ["sh", "-c", as_shell_line(command)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.home(),
        )
        return _LocalProcess(popen)

    def home(self) -> str:
        return os.path.expanduser("~")

    def close(self) -> None:
        pass
