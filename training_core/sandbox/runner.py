"""Run one untrusted Python program in a separate, limited process and report what happened.

Model-written code runs only through here, never in the trainer's process. See ``isolation`` for
what keeps it away from the host and ``prelude`` for the limits applied inside the interpreter.
The parent enforces what the child cannot be trusted with: the wall clock, the output caps, and
killing the whole tree at the end.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from training_core.sandbox.isolation import UIDS, Isolation, Launcher, detect
from training_core.sandbox.prelude import PRELUDE


class Status(str, enum.Enum):
    OK = "ok"  # exit status 0
    SYNTAX_ERROR = "syntax_error"  # the program did not compile (SyntaxError, IndentationError)
    RUNTIME_ERROR = "runtime_error"  # non-zero exit status
    TIMEOUT = "timeout"  # wall clock or CPU time ran out
    MEMORY_LIMIT = "memory_limit"  # the address-space limit was hit (MemoryError or killed)
    OUTPUT_LIMIT = "output_limit"  # stdout or stderr went past its cap; the program was killed
    KILLED = "killed"  # died from a signal for another reason


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Defaults follow REFERENCE §5 (3 s for code_execution rewards)."""

    timeout_s: float = 3.0  # wall clock, seconds; the tree is killed when it passes
    cpu_s: int = 0  # CPU seconds per process (RLIMIT_CPU); 0 = ceil(timeout_s) + 1
    memory_mb: int = 512  # address space per process (RLIMIT_AS), MiB
    max_processes: int = 16  # processes+threads of the sandbox uid (RLIMIT_NPROC); stops fork bombs
    max_output_bytes: int = 1 << 20  # per stream; more and the program is killed (output_limit)
    max_file_bytes: int = 16 << 20  # largest file the program may write (RLIMIT_FSIZE)
    max_open_files: int = 256  # RLIMIT_NOFILE

    def rlimit_arg(self) -> str:
        cpu = self.cpu_s or int(self.timeout_s) + 2
        return ",".join(str(v) for v in (self.memory_mb << 20, cpu, self.max_processes,
                                         self.max_file_bytes, self.max_open_files))


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
    launcher_error: str = ""  # what unshare itself printed, if anything
    truncated: bool = False  # some output was cut at the cap

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


@dataclass
class _Streams:
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    launcher: bytearray = field(default_factory=bytearray)
    status: bytearray = field(default_factory=bytearray)
    over_cap: bool = False


_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


def _kill_tree(pid: int, pidfd: int, launcher: Launcher) -> None:
    """Kill the sandbox's whole tree and return only when its namespace is empty.

    With a PID namespace: SIGKILL the namespace's first process (the launcher's ``--kill-child`` is
    cleared when it changes uid, so we do it); the kernel then kills every process in the namespace
    and the first process finishes exiting only once they are all gone, after which the launcher
    exits. Waiting for the launcher therefore means no survivor. Then, in every mode, SIGKILL the
    launcher's process group (all there is to do without a namespace)."""
    if launcher.isolation.pid_namespace:
        kids: list[int] = []
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        for k in kids:
            with contextlib.suppress(OSError):
                os.kill(k, signal.SIGKILL)
        if kids:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll(5000)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _pump(fds: dict[int, bytearray], pidfd: int, deadline: float,
          cap: int, streams: _Streams) -> str:
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
        if now >= deadline:
            return "timeout"
        wait_s = deadline - now
        if exited_at is not None:  # launcher gone: drain briefly, then kill whatever holds pipes
            if now - exited_at > 0.5:
                return "leftover"
            wait_s = min(wait_s, 0.5)
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
            buf += chunk[:max(room, 0)]
            if len(chunk) > room:
                streams.over_cap = True
                return "output"
    return ""


def _classify(streams: _Streams, kill_reason: str, rc: int, cpu_s: float, cpu_limit: int,
              err_text: str) -> Status:
    st = bytes(streams.status)
    launcher = streams.launcher.decode("utf-8", "replace")
    signaled = rc < 0 or "sigprocmask unblock failed" in launcher  # util-linux 2.38 on SIGKILL
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


def run_python(code: str, limits: SandboxLimits | None = None, launcher: Launcher | None = None
               ) -> SandboxResult:
    """Run ``code`` as a ``__main__`` program in a fresh sandbox and wait for the result."""
    limits = limits or SandboxLimits()
    launcher = launcher or detect()
    uid = UIDS.acquire() if launcher.needs_uid else None
    workdir = tempfile.mkdtemp(prefix="pippa-sbx-")
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    try:
        path = os.path.join(workdir, "main.py")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(code)
        if uid is not None:
            os.chown(workdir, uid, uid)
            os.chown(path, uid, uid)
        os.chmod(workdir, 0o700)
        argv = [*launcher.prefix(uid), launcher.python, "-I", "-S", "-B", "-c", PRELUDE,
                str(err_w), str(st_w), limits.rlimit_arg()]
        setuid_mode = launcher.isolation.mode == "setuid"
        env = {"PATH": _ENV_PATH, "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=env, pass_fds=(err_w, st_w), start_new_session=True,
            user=uid if setuid_mode else None, group=uid if setuid_mode else None,
            extra_groups=[] if setuid_mode else None)
        os.close(err_w)
        os.close(st_w)
        err_w = st_w = -1
        return _collect(proc, launcher, limits, start, err_r, st_r)
    finally:
        for fd in (err_r, err_w, st_r, st_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        if uid is not None:
            UIDS.release(uid)


def _collect(proc: subprocess.Popen[bytes], launcher: Launcher, limits: SandboxLimits, start: float,
             err_r: int, st_r: int) -> SandboxResult:
    assert proc.stdout is not None and proc.stderr is not None
    streams = _Streams()
    fds = {proc.stdout.fileno(): streams.out, err_r: streams.err, proc.stderr.fileno(): streams.launcher,
           st_r: streams.status}
    pidfd = os.pidfd_open(proc.pid)
    try:
        reason = _pump(fds, pidfd, start + limits.timeout_s, limits.max_output_bytes, streams)
    finally:
        # after a normal exit the launcher is an unreaped zombie, so its pid cannot have been reused
        _kill_tree(proc.pid, pidfd, launcher)
        os.close(pidfd)
    _, wstatus, usage = os.wait4(proc.pid, 0)
    duration = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(wstatus)
    proc.returncode = rc
    proc.stdout.close()
    proc.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    err_text = streams.err.decode("utf-8", "replace")
    cpu_limit = limits.cpu_s or int(limits.timeout_s) + 2
    status = _classify(streams, reason if reason != "leftover" else "", rc, cpu, cpu_limit, err_text)
    launcher_msg = streams.launcher.decode("utf-8", "replace")
    signaled_1 = "sigprocmask unblock failed" in launcher_msg
    return SandboxResult(
        status=status, exit_code=-9 if signaled_1 else rc,
        stdout=streams.out.decode("utf-8", "replace"), stderr=err_text,
        duration_s=duration, cpu_s=cpu, completed=bytes(streams.status).endswith(b"D"),
        isolation=launcher.isolation, launcher_error=launcher_msg.strip(), truncated=streams.over_cap)
