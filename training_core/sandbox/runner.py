"""Run one untrusted Python program in a separate, limited process and report what happened.

Model-written code runs only through here, never in the trainer's process. See ``isolation`` for
what keeps it away from the host and ``prelude`` for the limits applied inside the interpreter.
The parent enforces what the child cannot be trusted with: the wall clock, the output caps, and
killing the whole tree at the end.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import marshal
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from training_core.sandbox.isolation import UIDS, Isolation, Launcher, detect
from training_core.sandbox.prelude import PRELUDE
from training_core.sandbox.values import decode


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
    launcher_error: str = ""  # what bwrap itself printed, if anything
    truncated: bool = False  # some output was cut at the cap
    values: tuple[Any, ...] | None = None  # the test calls' values (``values.Opaque`` if not built-in data)
    reason: str = ""  # which cap ended or hampered the run (memory, processes, disk, output, time)

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


def _readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` (a pidfd: readable once the process exited) is readable within ``timeout_s``.
    poll, not select: select refuses fds >= 1024, which a trainer with many files open hands out."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _kill_tree(pid: int, pidfd: int, launcher: Launcher, init_fd: int | None = None) -> None:
    """Kill the sandbox's whole tree and return only when its PID namespace is empty.

    With a PID namespace: SIGKILL the namespace's first process (bwrap's init); the kernel then kills
    every process in the namespace, and the init's exit completes only once they are all gone. So we
    wait on a pidfd of the init itself until it reports the exit (not merely the launcher's: bwrap's
    outer process exits as soon as the program does, while its init may still be emptying the
    namespace), then SIGKILL the launcher's process group (all there is to do without a namespace).
    ``init_fd`` was taken before the init could run (``_hold_init``); without it, pidfds are opened
    on the launcher's children while it has not exited, so a pid cannot name another process."""
    if init_fd is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(init_fd, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while not _readable(init_fd, max(deadline - time.monotonic(), 0)) and time.monotonic() < deadline:
            pass
    elif launcher.isolation.pid_namespace:
        kids: list[int] = []
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        held: list[int] = []
        for k in kids:
            with contextlib.suppress(OSError):
                held.append(os.pidfd_open(k))
        try:
            for fd in held:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            for fd in held:  # readable = exited, and an init exits after its namespace is empty
                while not _readable(fd, max(deadline - time.monotonic(), 0)):
                    if time.monotonic() >= deadline:
                        break
        finally:
            for fd in held:
                os.close(fd)
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
        if now >= deadline and exited_at is None:
            # late here is not late there: this thread may have been kept from running (the GIL held
            # elsewhere), so a launcher that already exited is drained, not called a timeout
            if not _readable(pidfd, 0):
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
            buf += chunk[:max(room, 0)]
            if len(chunk) > room:
                streams.over_cap = True
                return "output"
    return ""


def _classify(streams: _Streams, kill_reason: str, rc: int, cpu_s: float, cpu_limit: int,
              err_text: str) -> Status:
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


def run_python(code: str, limits: SandboxLimits | None = None, launcher: Launcher | None = None,
               calls: Sequence[str] = ()) -> SandboxResult:
    """Run ``code`` as a ``__main__`` program in a fresh sandbox and wait for the result.

    ``calls``: expressions evaluated in the program's namespace after it ran to its end; their values
    come back in ``SandboxResult.values`` (for tests compared outside the sandbox)."""
    limits = limits or SandboxLimits()
    launcher = launcher or detect()
    cg = launcher.cgroups
    uid = UIDS.acquire() if launcher.needs_uid else None
    slot = cg.acquire(limits.total_memory_mb << 20, limits.max_processes + 1) if cg else None
    workdir = tempfile.mkdtemp(prefix="pippa-sbx-") if launcher.bwrap is None else None
    fds: list[int] = []
    try:
        src = os.memfd_create("pippa-program", 0)
        fds.append(src)
        os.write(src, marshal.dumps((code.encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
                                     tuple(calls))))
        os.lseek(src, 0, os.SEEK_SET)
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        fds += [err_r, err_w, st_r, st_w]
        child_fds = [src, err_w, st_w]
        sync: tuple[int, int] | None = None
        if launcher.bwrap is not None:  # bwrap names its namespace's init, then waits for a go-ahead
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            fds += [info_r, info_w, block_r, block_w]
            sync = (info_w, block_r)
            child_fds += [info_w, block_r]
        flt = launcher.seccomp.fd() if launcher.seccomp is not None else None
        if flt is not None:
            fds.append(flt)
            child_fds.append(flt)
        disk = limits.disk_mb << 20
        argv = [*launcher.prefix(disk - disk // 4, disk // 4, sync, uid, flt), launcher.python,
                "-I", "-S", "-B", "-c", PRELUDE, str(src), str(err_w), str(st_w), limits.rlimit_arg(),
                str(launcher.seccomp.keyctl_nr if launcher.seccomp is not None else -1),
                launcher.read_roots()]
        env = {"PATH": _ENV_PATH, "HOME": workdir or "/tmp", "TMPDIR": workdir or "/tmp", "LANG": "C.UTF-8"}
        before = cg.counters(slot) if cg and slot is not None else None
        popen_uid = uid if launcher.bwrap is None or launcher.setpriv is None else None
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir or "/", env=env, pass_fds=child_fds, start_new_session=True,
            user=popen_uid, group=popen_uid, extra_groups=[] if popen_uid is not None else None)
        for fd in child_fds:
            os.close(fd)
            fds.remove(fd)
        init_fd: int | None = None
        if sync is not None:
            join = functools.partial(cg.join, slot) if cg and slot is not None else None
            try:
                # the program has not started (it waits on the block fd): this deadline is bwrap's
                init_fd = _hold_init(info_r, block_w, start + limits.timeout_s + 10.0, join)
            except OSError:
                init_fd = None
            if init_fd is None:  # never let it run outside its caps: bwrap's child dies with its parent
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            else:
                fds.append(init_fd)
        # the time cap counts from when the program may run (after the cgroup join), not from the spawn
        result = _collect(proc, launcher, limits, start, time.monotonic(), err_r, st_r, len(calls), init_fd)
        if cg and slot is not None and before is not None:
            after = cg.counters(slot)
            if after.oom_kills > before.oom_kills:
                result = replace(result, status=Status.MEMORY_LIMIT,
                                 reason=f"memory cap: {limits.total_memory_mb} MiB for all processes "
                                        f"({cg.kind})")
            elif after.fork_refusals > before.fork_refusals and not result.reason:
                result = replace(result, reason=f"process cap: {limits.max_processes} ({cg.kind} pids.max)")
        return result
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        if uid is not None:
            UIDS.release(uid)
        if cg and slot is not None:
            cg.release(slot)


def _hold_init(info_r: int, block_w: int, deadline: float, join: Callable[[int], None] | None) -> int | None:
    """Read the pid of bwrap's namespace init from its info fd, take a pidfd on it, move it into the
    run's cgroups (``join``, when there are some), then let it go; the pidfd, or None when that did
    not happen (bwrap failed: the info fd just closes; or the deadline passed).

    The init waits on the block fd meanwhile, so nothing can have reaped it and the pid names it. The
    pidfd is what the end of a run waits on: bwrap's outer process exits as soon as the program does
    (its init reports the status first), while the init is still tearing the namespace down."""
    buf = b""
    poller = select.poll()
    poller.register(info_r, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return False
        chunk = os.read(info_r, 4096)
        if not chunk:
            return False
        buf += chunk
        try:
            child = int(json.loads(buf)["child-pid"])
            break
        except (ValueError, KeyError, TypeError):
            continue
    init_fd = os.pidfd_open(child)
    try:
        if join is not None:
            join(child)
        os.write(block_w, b"1")
    except OSError:
        os.close(init_fd)
        raise
    return init_fd


def _collect(proc: subprocess.Popen[bytes], launcher: Launcher, limits: SandboxLimits, start: float,
             released: float, err_r: int, st_r: int, n_calls: int, init_fd: int | None) -> SandboxResult:
    assert proc.stdout is not None and proc.stderr is not None
    streams = _Streams()
    fds = {proc.stdout.fileno(): streams.out, err_r: streams.err, proc.stderr.fileno(): streams.launcher,
           st_r: streams.status}
    pidfd = os.pidfd_open(proc.pid)
    try:
        reason = _pump(fds, pidfd, released + limits.timeout_s, limits.max_output_bytes, streams)
    finally:
        # after a normal exit the launcher is an unreaped zombie, so its pid cannot have been reused
        _kill_tree(proc.pid, pidfd, launcher, init_fd)
        os.close(pidfd)
    _, wstatus, usage = os.wait4(proc.pid, 0)
    duration = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(wstatus)
    if launcher.bwrap is not None and rc > 128:  # bwrap reports a signal as 128 + its number
        rc = 128 - rc
    proc.returncode = rc
    proc.stdout.close()
    proc.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    err_text = streams.err.decode("utf-8", "replace")
    cpu_limit = limits.cpu_s or int(limits.timeout_s) + 2
    status = _classify(streams, reason if reason != "leftover" else "", rc, cpu, cpu_limit, err_text)
    st = bytes(streams.status)
    values = None
    if n_calls and st.startswith(b"R") and b"V" in st:
        line = st[st.index(b"V") + 1:].split(b"\n", 1)[0]
        values = decode(line, n_calls)
    why = {Status.TIMEOUT: f"time cap: {limits.timeout_s:g} s",
           Status.OUTPUT_LIMIT: f"output cap: {limits.max_output_bytes} bytes per stream",
           Status.MEMORY_LIMIT: f"memory cap: {limits.memory_mb} MiB per process (RLIMIT_AS)"}.get(status, "")
    if not why and "No space left on device" in err_text:
        why = f"disk cap: {limits.disk_mb} MiB of tmpfs"
    return SandboxResult(
        status=status, exit_code=rc, stdout=streams.out.decode("utf-8", "replace"), stderr=err_text,
        duration_s=duration, cpu_s=cpu, completed=st.startswith(b"R") and st.endswith(b"D"),
        isolation=launcher.isolation, launcher_error=streams.launcher.decode("utf-8", "replace").strip(),
        truncated=streams.over_cap, values=values, reason=why)


def failed_result(launcher: Launcher, reason: str) -> SandboxResult:
    """The result of a run the sandbox could not carry out (``Status.ERROR``)."""
    return SandboxResult(status=Status.ERROR, exit_code=None, stdout="", stderr="", duration_s=0.0, cpu_s=0.0,
                         completed=False, isolation=launcher.isolation, reason=reason)
