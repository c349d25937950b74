"""Run one untrusted Python program in a separate, limited process and report what happened.

Model-written code runs only through here, never in the trainer's process. See ``isolation`` for
what keeps it away from the host and ``prelude`` for the limits applied inside the interpreter.
The parent enforces what the child cannot be trusted with: the wall clock, the output caps, and
killing the whole tree at the end. A launcher at the gVisor level runs its program through
``gvisor.run`` instead.
"""

from __future__ import annotations

import contextlib
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
from dataclasses import replace

from training_core.sandbox import gvisor
from training_core.sandbox.isolation import detect
from training_core.sandbox.launcher import Launcher
from training_core.sandbox.prelude import PRELUDE
from training_core.sandbox.results import (
    SandboxLimits,
    SandboxResult,
    Status,
    Streams,
    classify,
    pump,
    readable,
)
from training_core.sandbox.uids import UIDS
from training_core.sandbox.values import decode

_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


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
        while not readable(init_fd, max(deadline - time.monotonic(), 0)) and time.monotonic() < deadline:
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
                while not readable(fd, max(deadline - time.monotonic(), 0)):
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


def run_python(
    code: str,
    limits: SandboxLimits | None = None,
    launcher: Launcher | None = None,
    calls: Sequence[str] = (),
) -> SandboxResult:
    """Run ``code`` as a ``__main__`` program in a fresh sandbox and wait for the result.

    ``calls``: expressions evaluated in the program's namespace after it ran to its end; their values
    come back in ``SandboxResult.values`` (for tests compared outside the sandbox)."""
    limits = limits or SandboxLimits()
    launcher = launcher or detect()
    if launcher.runsc is not None:
        return gvisor.run(code, limits, launcher, calls)
    cg = launcher.cgroups
    uid = UIDS.acquire() if launcher.needs_uid else None
    slot = cg.acquire(limits.total_memory_mb << 20, limits.max_processes + 1) if cg else None
    workdir = tempfile.mkdtemp(prefix="pippa-sbx-") if launcher.bwrap is None else None
    fds: list[int] = []
    try:
        src = os.memfd_create("pippa-program", 0)
        fds.append(src)
        os.write(
            src,
            marshal.dumps((code.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), tuple(calls))),
        )
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
        argv = [
            *launcher.prefix(disk - disk // 4, disk // 4, sync, uid, flt),
            launcher.python,
            "-I",
            "-S",
            "-B",
            "-c",
            PRELUDE,
            str(src),
            str(err_w),
            str(st_w),
            limits.rlimit_arg(),
            str(launcher.seccomp.keyctl_nr if launcher.seccomp is not None else -1),
            launcher.read_roots(),
        ]
        env = {"PATH": _ENV_PATH, "HOME": workdir or "/tmp", "TMPDIR": workdir or "/tmp", "LANG": "C.UTF-8"}
        before = cg.counters(slot) if cg and slot is not None else None
        popen_uid = uid if launcher.bwrap is None or launcher.setpriv is None else None
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir or "/",
            env=env,
            pass_fds=child_fds,
            start_new_session=True,
            user=popen_uid,
            group=popen_uid,
            extra_groups=[] if popen_uid is not None else None,
        )
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
                result = replace(
                    result,
                    status=Status.MEMORY_LIMIT,
                    reason=f"memory cap: {limits.total_memory_mb} MiB for all processes ({cg.kind})",
                )
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


def _collect(
    proc: subprocess.Popen[bytes],
    launcher: Launcher,
    limits: SandboxLimits,
    start: float,
    released: float,
    err_r: int,
    st_r: int,
    n_calls: int,
    init_fd: int | None,
) -> SandboxResult:
    assert proc.stdout is not None and proc.stderr is not None
    streams = Streams()
    fds = {
        proc.stdout.fileno(): streams.out,
        err_r: streams.err,
        proc.stderr.fileno(): streams.launcher,
        st_r: streams.status,
    }
    pidfd = os.pidfd_open(proc.pid)
    try:
        reason = pump(fds, pidfd, released + limits.timeout_s, limits.max_output_bytes, streams)
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
    status = classify(streams, reason if reason != "leftover" else "", rc, cpu, cpu_limit, err_text)
    st = bytes(streams.status)
    values = None
    if n_calls and st.startswith(b"R") and b"V" in st:
        line = st[st.index(b"V") + 1 :].split(b"\n", 1)[0]
        values = decode(line, n_calls)
    why = {
        Status.TIMEOUT: f"time cap: {limits.timeout_s:g} s",
        Status.OUTPUT_LIMIT: f"output cap: {limits.max_output_bytes} bytes per stream",
        Status.MEMORY_LIMIT: f"memory cap: {limits.memory_mb} MiB per process (RLIMIT_AS)",
    }.get(status, "")
    if not why and "No space left on device" in err_text:
        why = f"disk cap: {limits.disk_mb} MiB of tmpfs"
    return SandboxResult(
        status=status,
        exit_code=rc,
        stdout=streams.out.decode("utf-8", "replace"),
        stderr=err_text,
        duration_s=duration,
        cpu_s=cpu,
        completed=st.startswith(b"R") and st.endswith(b"D"),
        isolation=launcher.isolation,
        launcher_error=streams.launcher.decode("utf-8", "replace").strip(),
        truncated=streams.over_cap,
        values=values,
        reason=why,
    )


def failed_result(launcher: Launcher, reason: str) -> SandboxResult:
    """The result of a run the sandbox could not carry out (``Status.ERROR``)."""
    return SandboxResult(
        status=Status.ERROR,
        exit_code=None,
        stdout="",
        stderr="",
        duration_s=0.0,
        cpu_s=0.0,
        completed=False,
        isolation=launcher.isolation,
        reason=reason,
    )
