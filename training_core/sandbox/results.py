"""What a sandboxed run reports, and the parts every launcher shares: its limits, its status, reading
its pipes until it ends (``pump``) and telling how it ended (``classify``). ``runner`` (bubblewrap)
and ``gvisor`` both build on these."""

from __future__ import annotations

import enum
import os
import select
import time
from dataclasses import dataclass, field
from typing import Any

from training_core.sandbox.launcher import Isolation


class Status(enum.StrEnum):
    OK = "ok"  # exit status 0
    SYNTAX_ERROR = "syntax_error"  # the program did not compile (SyntaxError, IndentationError)
    RUNTIME_ERROR = "runtime_error"  # non-zero exit status
    TIMEOUT = "timeout"  # wall clock or CPU time ran out
    MEMORY_LIMIT = "memory_limit"  # the address-space limit was hit (MemoryError or killed)
    OUTPUT_LIMIT = "output_limit"  # stdout or stderr went past its cap; the program was killed
    KILLED = "killed"  # died from a signal for another reason
    ERROR = "error"  # the sandbox itself failed for this run (``reason`` says how); scored as a failure


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. The 3 s default is the code_execution reward's budget per program."""

    timeout_s: float = 3.0  # wall clock, seconds; the tree is killed when it passes
    cpu_s: int = 0  # CPU seconds per process (RLIMIT_CPU); 0 = ceil(timeout_s) + 1
    memory_mb: int = 512  # address space per process (RLIMIT_AS), MiB
    total_memory_mb: int = 1024  # all processes and tmpfs pages together (cgroup memory limit), MiB
    max_processes: int = 16  # processes+threads (cgroup pids.max and RLIMIT_NPROC); stops fork bombs
    disk_mb: int = 64  # writable space: /tmp (the working dir) gets 3/4, /dev/shm 1/4; both are tmpfs
    max_output_bytes: int = 1 << 20  # per stream; more and the program is killed (output_limit)
    max_file_bytes: int = 16 << 20  # largest file the program may write (RLIMIT_FSIZE)
    max_open_files: int = 256  # RLIMIT_NOFILE

    def rlimit_arg(self) -> str:
        cpu = self.cpu_s or int(self.timeout_s) + 2
        return ",".join(
            str(v)
            for v in (self.memory_mb << 20, cpu, self.max_processes, self.max_file_bytes, self.max_open_files)
        )


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    exit_code: int | None  # the program's exit status; negative = signal; None when unknown
    stdout: str  # capped at max_output_bytes
    stderr: str  # the program's stderr only (launcher messages are kept apart), capped
    duration_s: float  # wall clock from spawn to reap
    cpu_s: float  # user+system CPU of the reaped tree
    completed: bool  # the program ran to its last line (no exception, no early sys.exit/os._exit)
    isolation: Isolation
    launcher_error: str = ""  # what bwrap itself printed, if anything
    truncated: bool = False  # some output was cut at the cap
    values: tuple[Any, ...] | None = None  # the test calls' values (``values.Opaque`` if not built-in data)
    reason: str = ""  # which cap ended or hampered the run (memory, processes, disk, output, time)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


@dataclass
class Streams:
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    launcher: bytearray = field(default_factory=bytearray)
    status: bytearray = field(default_factory=bytearray)
    over_cap: bool = False


def readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` (a pidfd: readable once the process exited) is readable within ``timeout_s``.
    poll, not select: select refuses fds >= 1024, which a trainer with many files open hands out."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def pump(fds: dict[int, bytearray], pidfd: int, deadline: float, cap: int, streams: Streams) -> str:
    """Read all pipes until they close and the launcher exits.

    Returns "" or why the tree must die: timeout, output (a cap was passed), leftover (pipes still
    held after the launcher exited, possible only without a PID namespace)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    poller.register(pidfd, select.POLLIN)
    open_fds = set(fds)
    exited_at: float | None = None
    while open_fds or exited_at is None:
        now = time.monotonic()
        if now >= deadline and exited_at is None:
            # late here is not late there: this thread may have been kept from running (the GIL held
            # elsewhere), so a launcher that already exited is drained, not called a timeout
            if not readable(pidfd, 0):
                return "timeout"
            exited_at = now
            poller.unregister(pidfd)
        wait_s = deadline - now
        if exited_at is not None:  # launcher gone: drain briefly, then kill whatever holds pipes
            if now - exited_at > 0.5:
                return "leftover"
            wait_s = 0.5 - (now - exited_at)
        for fd, _ev in poller.poll(wait_s * 1000):
            if fd == pidfd:
                exited_at = time.monotonic()
                poller.unregister(pidfd)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            buf = fds[fd]
            room = cap - len(buf)
            buf += chunk[: max(room, 0)]
            if len(chunk) > room:
                streams.over_cap = True
                return "output"
    return ""


def classify(
    streams: Streams, kill_reason: str, rc: int, cpu_s: float, cpu_limit: int, err_text: str
) -> Status:
    st = bytes(streams.status)
    signaled = rc < 0
    if kill_reason == "output":
        return Status.OUTPUT_LIMIT
    if kill_reason == "timeout":
        return Status.TIMEOUT
    if st.startswith(b"S"):
        return Status.SYNTAX_ERROR
    if rc == 0 and not signaled:
        return Status.OK
    tail = err_text.strip().splitlines()[-1:] if err_text.strip() else []
    if tail and tail[0].startswith("MemoryError"):
        return Status.MEMORY_LIMIT
    if signaled and cpu_s >= cpu_limit - 0.1:
        return Status.TIMEOUT
    if signaled:
        return Status.KILLED
    return Status.RUNTIME_ERROR
