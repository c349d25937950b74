"""The gVisor level (``sandbox.isolation = "gvisor"``): each program in its own gVisor sandbox.

gVisor's ``runsc`` runs the program on a kernel of its own (the sentry, a user-space kernel) rather
than the host's: its ``/proc`` and ``sysinfo(2)`` are the sentry's, with none of the host's counters
(no ``/proc/vmstat``; ``/proc/meminfo`` does not move with other processes), and its accounting of
locked memory, message queues and signals is its own. Each run is an OCI container of its own:

- the bundle: a ``config.json`` in a private directory, rooted at a read-only, empty root file system
  made once per launcher (``/bin``, ``/lib``... as links into ``/usr``), with ``/usr`` bound
  read-only from the launcher's (the resident copy for code rewards, ``usrcopy``), ``/tmp`` and
  ``/dev/shm`` gVisor tmpfs of the run's disk cap, a fresh ``/proc``, no network (``--network=none``),
  its own PID, IPC, UTS and mount namespaces, no capabilities, the program as ``nobody``;
- ``runsc --root <private state dir> --ignore-cgroups run`` under a unique container id; runsc and
  every process it starts sit in the run's cgroup slot (``CgroupSlots``: joined by the shell that
  execs runsc, so nothing forks outside) with the run's memory cap plus ``SENTRY_MB`` for gVisor
  itself, and ``HOST_TASKS`` host tasks (the sentry and gofer are Go programs with many threads; the
  program's own processes are the sentry's, capped inside by the prelude's RLIMIT_NPROC, which gVisor
  enforces, as it does RLIMIT_AS);
- only stdio crosses into a gVisor sandbox, so the program arrives on stdin and the prelude's status
  records come back framed on stderr (``split_status``; as untrusted as the status fd elsewhere);
- at the end, whatever happened: the launcher's process group is killed (the sandbox runs attached
  to ``runsc run`` and dies with it), then every process left in the cgroup slot, or without a slot
  ``runsc delete --force`` when the container's state is still there; the bundle and state
  directories are removed. The status records share the stderr cap with the program's stderr.

The level is chosen only when asked for and where a probe program runs in it; otherwise ``detect``
raises ``SandboxUnavailable`` with one line, never a weaker level.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import marshal
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from training_core.sandbox.cgroups import CgroupSlots
from training_core.sandbox.isolation import LEVEL_DETECTORS, process_cgroups, python_candidates
from training_core.sandbox.launcher import Isolation, Launcher, SandboxUnavailable
from training_core.sandbox.prelude import PRELUDE
from training_core.sandbox.results import SandboxLimits, SandboxResult, Status, Streams, classify, pump
from training_core.sandbox.values import decode

RUNSC = "runsc"
SEARCH = "/usr/local/bin:/usr/bin:/bin"  # where runsc is looked for: not the trainer's PATH, as for bwrap
HINT = "install gVisor's runsc (Debian/Ubuntu: apt-get install runsc)"
FRAME = b"\0pippa-status:"
SENTRY_MB = 256  # gVisor's own memory (sentry and gofer) on top of the program's cap
HOST_TASKS = 1024  # host threads of runsc, its sentry and its gofer: Go runtimes, dozens each
START_S = 1.0  # added to the time cap: gVisor's start (0.1-0.3 s here) counts in the wall clock
NOBODY = 65534
# put this shell into each file named before "--" (the slot's cgroup.procs), then become runsc
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_PATH = "/usr/local/bin:/usr/bin:/bin"


def split_status(err: bytes) -> tuple[bytes, bytes]:
    """(the program's stderr, the prelude's status records) from the container's stderr."""
    parts = err.split(FRAME)
    text, status = bytearray(parts[0]), bytearray()
    for part in parts[1:]:
        record, _, rest = part.partition(b"\0")
        status += record
        text += rest
    return bytes(text), bytes(status)


def _rootfs() -> str:
    """An empty root file system (mount points, links into /usr), made once and removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="pippa-gvisor-root-"))
    atexit.register(shutil.rmtree, root, True)
    for d in ("usr", "tmp", "proc", "dev"):
        (root / d).mkdir()
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{top}"):
            os.symlink(os.readlink(f"/{top}"), root / top)
        elif os.path.isdir(f"/{top}"):
            (root / top).mkdir()
    root.chmod(0o755)
    return str(root)


def config(launcher: Launcher, limits: SandboxLimits, argv: list[str]) -> dict[str, object]:
    """The OCI runtime spec of one run."""
    disk = limits.disk_mb << 20
    binds = [
        {"destination": top, "type": "bind", "source": f"/{top}", "options": ["ro", "rbind"]}
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
        if os.path.isdir(f"/{top}") and not os.path.islink(f"/{top}")
    ]
    binds += [
        {"destination": p, "type": "bind", "source": p, "options": ["ro", "rbind"]} for p in launcher.extra_ro
    ]
    return {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False,
            "user": {"uid": NOBODY, "gid": NOBODY},
            "args": argv,
            "cwd": "/tmp",
            "env": [f"PATH={_PATH}", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8"],
            "capabilities": {},
            "noNewPrivileges": True,
        },
        "root": {"path": launcher.rootfs, "readonly": True},
        "hostname": "sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr", "type": "bind", "source": launcher.usr, "options": ["ro", "rbind"]},
            *binds,
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": [f"size={disk - disk // 4}", "mode=1777"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": [f"size={disk // 4}", "mode=1777"],
            },
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }


def runsc_argv(launcher: Launcher, state: Path, bundle: Path, cid: str) -> list[str]:
    assert launcher.runsc is not None
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    return [
        launcher.runsc,
        "--root",
        str(state),
        *rootless,
        "--network=none",
        "--ignore-cgroups",
        "run",
        "--bundle",
        str(bundle),
        cid,
    ]


def run(code: str, limits: SandboxLimits, launcher: Launcher, calls: Sequence[str] = ()) -> SandboxResult:
    """``runner.run_python`` at the gVisor level: ``code`` in a gVisor sandbox of its own."""
    assert launcher.runsc is not None
    cg = launcher.cgroups
    slot = cg.acquire((limits.total_memory_mb + SENTRY_MB) << 20, HOST_TASKS) if cg else None
    work = Path(tempfile.mkdtemp(prefix="pippa-gvisor-"))
    state, bundle, cid = work / "state", work / "bundle", f"pippa-{secrets.token_hex(8)}"
    src = -1
    proc: subprocess.Popen[bytes] | None = None
    try:
        state.mkdir(mode=0o700)
        bundle.mkdir()
        prelude_argv = [
            launcher.python,
            "-I",
            "-S",
            "-B",
            "-c",
            PRELUDE,
            "0",
            "2",
            "-",
            limits.rlimit_arg(),
            "-1",
            "-",
        ]
        (bundle / "config.json").write_text(json.dumps(config(launcher, limits, prelude_argv)))
        src = os.memfd_create("pippa-program", 0)
        os.write(
            src,
            marshal.dumps((code.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), tuple(calls))),
        )
        os.lseek(src, 0, os.SEEK_SET)
        argv = runsc_argv(launcher, state, bundle, cid)
        if cg and slot is not None:
            argv = ["/bin/sh", "-c", _JOIN, "sh", *cg.procs_files(slot), "--", *argv]
        before = cg.counters(slot) if cg and slot is not None else None
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=src,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env={"PATH": _PATH, "LANG": "C.UTF-8"},
            start_new_session=True,
        )
        os.close(src)
        src = -1
        result = _collect(proc, launcher, limits, start, len(calls), (cid, state, cg, slot))
        if cg and slot is not None and before is not None and cg.counters(slot).oom_kills > before.oom_kills:
            result = replace(
                result,
                status=Status.MEMORY_LIMIT,
                reason=f"memory cap: {limits.total_memory_mb} MiB and {SENTRY_MB} MiB for gVisor ({cg.kind})",
            )
        return result
    finally:
        if src >= 0:
            os.close(src)
        if proc is not None and proc.returncode is None:  # failed before the run was collected
            _destroy(proc.pid, launcher, state, cid, cg, slot)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        if cg and slot is not None:
            cg.release(slot)


def _destroy(
    pid: int, launcher: Launcher, state: Path, cid: str, cg: CgroupSlots | None, slot: int | None
) -> None:
    """Nothing of the run survives: its launcher, the container (runsc's own record of it), and every
    process in its cgroup slot."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if cg and slot is not None:  # every process of the run is in the slot: its state is files, removed later
        cg.kill_all(slot)
    elif state.is_dir() and any(state.iterdir()) and launcher.runsc:  # runsc run deletes it on a normal exit
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [launcher.runsc, "--root", str(state), "delete", "--force", cid],
                timeout=30,
                capture_output=True,
                cwd=state.parent,
            )


def _collect(
    proc: subprocess.Popen[bytes],
    launcher: Launcher,
    limits: SandboxLimits,
    start: float,
    n_calls: int,
    ctx: tuple[str, Path, CgroupSlots | None, int | None],
) -> SandboxResult:
    assert proc.stdout is not None and proc.stderr is not None
    streams = Streams()
    raw = bytearray()
    pidfd = os.pidfd_open(proc.pid)
    try:
        reason = pump(
            {proc.stdout.fileno(): streams.out, proc.stderr.fileno(): raw},
            pidfd,
            start + limits.timeout_s + START_S,
            limits.max_output_bytes,
            streams,
        )
    finally:
        os.close(pidfd)
        cid, state, cg, slot = ctx
        _destroy(proc.pid, launcher, state, cid, cg, slot)
    _, wstatus, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(wstatus)
    if rc > 128:  # runsc reports the program's death by a signal as 128 + its number
        rc = 128 - rc
    proc.returncode = rc
    proc.stdout.close()
    proc.stderr.close()
    err, st = split_status(bytes(raw))
    streams.status = bytearray(st)
    err_text = err.decode("utf-8", "replace")
    cpu = usage.ru_utime + usage.ru_stime
    status = classify(
        streams,
        reason if reason != "leftover" else "",
        rc,
        cpu,
        limits.cpu_s or int(limits.timeout_s) + 2,
        err_text,
    )
    launcher_error, why = "", ""
    if not st and status not in (Status.TIMEOUT, Status.OUTPUT_LIMIT):  # the prelude never started
        launcher_error = err_text.strip()
        status, err_text = Status.ERROR, ""
        why = f"gVisor: {(launcher_error.splitlines() or [f'runsc exit status {rc}'])[-1][:300]}"
    values = None
    if n_calls and st.startswith(b"R") and b"V" in st:
        values = decode(st[st.index(b"V") + 1 :].split(b"\n", 1)[0], n_calls)
    why = why or {
        Status.TIMEOUT: f"time cap: {limits.timeout_s:g} s (+{START_S:g} s for gVisor to start)",
        Status.OUTPUT_LIMIT: f"output cap: {limits.max_output_bytes} bytes per stream",
        Status.MEMORY_LIMIT: f"memory cap: {limits.memory_mb} MiB per process (RLIMIT_AS)",
    }.get(status, "")
    return SandboxResult(
        status=status,
        exit_code=rc,
        stdout=streams.out.decode("utf-8", "replace"),
        stderr=err_text,
        duration_s=time.monotonic() - start,
        cpu_s=cpu,
        completed=st.startswith(b"R") and st.endswith(b"D"),
        isolation=launcher.isolation,
        launcher_error=launcher_error,
        truncated=streams.over_cap,
        values=values,
        reason=why,
    )


def detect(runsc: str = RUNSC) -> Launcher:
    """A launcher at the gVisor level, or ``SandboxUnavailable`` with one line: runsc missing (a name is
    looked for in ``SEARCH``), or a probe program that does not run in it (what runsc said)."""
    path = shutil.which(runsc, path=SEARCH)
    if path is None:
        raise SandboxUnavailable(
            f"no sandbox for model-written code at isolation = gvisor ({runsc} not "
            f'found): {HINT}; or set sandbox.isolation = "strict" in the recipe'
        )
    slots = process_cgroups()
    cg = slots if isinstance(slots, CgroupSlots) else None
    cap = f"{cg.kind} (with {SENTRY_MB} MiB for gVisor)" if cg else "rlimit"
    notes = ["a kernel of its own: no machine-wide /proc file or counter of the host's"]
    if cg is None:
        notes.append(f"memory and process caps are per process (rlimits inside gVisor): no cgroup ({slots})")
    pids = "rlimit in gVisor" + (f", {cg.kind}" if cg else "")
    iso = Isolation(
        "gvisor",
        True,
        True,
        False,
        True,
        cap,
        pids,
        tuple(notes),
        seccomp=f"gVisor ({path}): the program's system calls go to its kernel",
        level="gvisor",
    )
    why: list[str] = []
    rootfs = _rootfs()
    for python, binds in python_candidates():
        launcher = Launcher(iso, python, None, cg, binds, runsc=path, rootfs=rootfs)
        try:
            r = run(
                "import os\nprint('pippa-probe', os.path.exists('/proc/vmstat'))",
                SandboxLimits(timeout_s=20),
                launcher,
            )
        except OSError as e:
            why.append(" ".join(f"{python}: {e}".split()))
            continue
        if r.ok and r.stdout.strip() == "pippa-probe False":
            return launcher
        why.append(" ".join(f"{python}: {r.reason or r.status} {r.stdout[-100:]} {r.stderr[-200:]}".split()))
    raise SandboxUnavailable(
        f"no sandbox for model-written code at isolation = gvisor ({path} did not run a "
        f'program: {"; ".join(why)}): {HINT}; or set sandbox.isolation = "strict" in '
        f"the recipe"
    )


LEVEL_DETECTORS["gvisor"] = detect
