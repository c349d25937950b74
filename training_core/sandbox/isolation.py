"""Which isolation this machine allows, found once by trying it; fail closed when there is none.

Model-written code runs under bubblewrap (``bwrap``, the sandbox Flatpak is built on), which sets up
with user namespaces what we would otherwise hand-roll:

- mount namespace: only ``/usr`` (read-only, plus the ``/bin``, ``/lib`` links into it) and the
  interpreter's prefix are visible; ``/tmp`` (the working directory) and ``/dev/shm`` are private,
  size-limited tmpfs that vanish with the run; everything else (``/root``, ``/home``, ``/etc``,
  ``/run``, ``/var``, the repo, other sandboxes, host unix-socket files) is simply not there; the root
  and ``/dev`` are read-only; ``/proc`` is a fresh one that shows only the sandbox's own processes;
- network, IPC, UTS, cgroup and PID namespaces (the whole tree dies with the namespace's first
  process), a new session (no TIOCSTI into our terminal), all capabilities dropped, no new
  privileges, and no further user namespaces inside (``--disable-userns``).

Modes, best first:

1. ``bwrap-root`` (we are root): bwrap runs under a per-run unprivileged uid, so RLIMIT_NPROC counts
   per sandbox (root is exempt from it) and nothing the sandbox does acts with root's rights; each
   run sits in its own cgroup for an aggregate memory cap (tmpfs pages included) and a process cap.
2. ``bwrap-user`` (not root, unprivileged user namespaces allowed): the same namespaces and file
   system view; caps come from per-process rlimits and tmpfs sizes (cgroups are not ours to create).
3. ``unsafe``: rlimits and a session only. Never chosen on its own: only when the caller asks for it
   (``detect(allow_unsafe=True)``, a recipe's ``sandbox.isolation = "unsafe"``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass

from training_core.errors import SandboxMissing
from training_core.sandbox.cgroups import CgroupSlots

# Unprivileged uids handed to concurrent sandboxes, one each, so RLIMIT_NPROC counts per sandbox
# (the kernel counts processes per real uid). Chosen above typical login uids and below 65534.
UID_BASE = 61000
UID_COUNT = 512
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user "
                "namespaces (sysctl user.max_user_namespaces > 0)")


class SandboxUnavailable(SandboxMissing):
    """No real isolation here: model-written code is refused rather than run unconfined."""


@dataclass(frozen=True)
class Isolation:
    """What was applied to a sandboxed run; tests and logs read it, nothing is assumed."""

    mode: str  # bwrap-root | bwrap-user | unsafe
    network: bool  # True when the program had no network (empty network namespace)
    pid_namespace: bool  # True when the whole process tree dies with the program
    uid_dropped: bool  # True when the program ran under its own unprivileged uid
    filesystem: bool = False  # True when the host file system is hidden (only /usr read-only)
    memory_cap: str = "rlimit"  # "cgroup v1" | "cgroup v2": all processes together; "rlimit": per process
    pids_cap: str = "rlimit"  # "cgroup v1" | "cgroup v2" | "rlimit" (RLIMIT_NPROC in the namespace)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launcher:
    """How to start the sandboxed interpreter: ``prefix`` goes before the interpreter argv."""

    isolation: Isolation
    python: str
    bwrap: str | None
    cgroups: CgroupSlots | None = None
    extra_ro: tuple[str, ...] = ()  # host paths bound read-only (an interpreter prefix outside /usr)
    setpriv: str | None = None  # util-linux setpriv: drops to the run's uid without forking the trainer

    def prefix(self, tmp_bytes: int, shm_bytes: int, sync_fds: tuple[int, int] | None = None,
               uid: int | None = None) -> list[str]:
        """bwrap's argv; ``sync_fds`` = (info fd, block fd): the sandbox waits until the caller has put
        its first process into the run's cgroup, so nothing it forks can start outside. ``uid``: run
        bwrap under that uid through ``setpriv`` (Popen's ``user=`` would make Python fork() the whole
        trainer instead of vfork())."""
        if self.bwrap is None:
            return []
        argv: list[str] = []
        if uid is not None and self.setpriv:
            argv = [self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                    "--"]
        argv += [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = f"/{top}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        for path in self.extra_ro:
            argv += ["--ro-bind", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(shm_bytes), "--tmpfs", "/dev/shm",
                 "--remount-ro", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--remount-ro", "/",
                 "--chdir", "/tmp", "--hostname", "sandbox", "--clearenv",
                 "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                 "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"]
        if sync_fds is not None:
            argv += ["--info-fd", str(sync_fds[0]), "--block-fd", str(sync_fds[1])]
        return argv

    @property
    def needs_uid(self) -> bool:
        return self.isolation.uid_dropped


class UidAllocator:
    """Hands out distinct sandbox uids to concurrent runs (thread-safe)."""

    def __init__(self, base: int = UID_BASE, count: int = UID_COUNT) -> None:
        self._free = list(range(base + count - 1, base - 1, -1))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append(uid)
            self._cond.notify()


UIDS = UidAllocator()

_lock = threading.Lock()
_cached: Launcher | None = None
_allow_unsafe = False


def allow_unsafe(on: bool = True) -> None:
    """Let ``detect()`` fall back to the ``unsafe`` mode (the recipe's explicit choice, logged)."""
    global _allow_unsafe, _cached
    with _lock:
        _allow_unsafe = on
        _cached = None


def _python_candidates() -> list[tuple[str, tuple[str, ...]]]:
    """(interpreter, read-only binds it needs): the system python first, it needs nothing but /usr."""
    seen: list[tuple[str, tuple[str, ...]]] = []
    for p in ("/usr/bin/python3", "/usr/local/bin/python3", getattr(sys, "_base_executable", sys.executable)):
        real = os.path.realpath(p)
        if not os.path.isfile(real) or any(real == s[0] for s in seen):
            continue
        binds: tuple[str, ...] = ()
        if not real.startswith("/usr/"):
            binds = (os.path.realpath(sys.base_prefix),)
        seen.append((real, binds))
    return seen


def _probe(launcher: Launcher, user: int | None) -> str:
    """"" when the launcher runs a program, else what went wrong (bwrap's own message)."""
    code = "import os, resource; print('pippa-probe-ok')"
    argv = [*launcher.prefix(1 << 20, 1 << 20, uid=user), launcher.python, "-I", "-S", "-c", code]
    popen_user = user if launcher.setpriv is None else None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd="/",
                           env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, user=popen_user,
                           group=popen_user, extra_groups=[] if popen_user is not None else None)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if r.returncode == 0 and r.stdout.strip() == "pippa-probe-ok":
        return ""
    return (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]


def detect(force_mode: str | None = None, allow_unsafe: bool | None = None) -> Launcher:
    """The best launcher this machine allows; cached after the first call (``force_mode`` bypasses).

    Raises ``SandboxUnavailable`` with one line naming what to install when no real isolation works
    and unsafe mode was not asked for."""
    global _cached
    with _lock:
        if _cached is not None and force_mode is None and allow_unsafe is None:
            return _cached
        launcher = _detect(force_mode, _allow_unsafe if allow_unsafe is None else allow_unsafe)
        if force_mode is None and allow_unsafe is None:
            _cached = launcher
        return launcher


def _unsafe() -> Launcher:
    iso = Isolation("unsafe", False, False, False, False, "rlimit", "rlimit",
                    ("UNSAFE: no namespaces; the program sees the host file system and network with the "
                     "caller's rights",))
    return Launcher(iso, os.path.realpath(sys.executable), None)


def _detect(force_mode: str | None, unsafe_ok: bool) -> Launcher:
    if force_mode == "unsafe":
        return _unsafe()
    root = os.geteuid() == 0
    bwrap = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    why: list[str] = []
    if bwrap is None:
        why.append("bwrap not found")
    else:
        modes = ["bwrap-root", "bwrap-user"] if root else ["bwrap-user"]
        if force_mode is not None:
            modes = [m for m in modes if m == force_mode]
        for mode in modes:
            cg = CgroupSlots.create() if mode == "bwrap-root" else None
            cap = cg.kind if cg else "rlimit"
            notes: list[str] = []
            if cg is None:
                notes.append("memory and process caps are per process (rlimits): no cgroup for this run")
            if mode == "bwrap-user":
                notes.append("runs with the caller's uid inside a user namespace")
            iso = Isolation(mode, True, True, mode == "bwrap-root", True, cap, cap, tuple(notes))
            for python, binds in _python_candidates():
                launcher = Launcher(iso, python, bwrap, cg, binds,
                                    shutil.which("setpriv", path="/usr/bin:/bin") if root else None)
                err = _probe(launcher, UID_BASE + UID_COUNT if mode == "bwrap-root" else None)
                if not err:
                    return launcher
                why.append(f"{mode} with {python}: {err}")
    if unsafe_ok and force_mode is None:
        return _unsafe()
    raise SandboxUnavailable(f"no sandbox for model-written code ({'; '.join(why)}): {INSTALL_HINT}, "
                             "or set sandbox.isolation = \"unsafe\" in the recipe to run it unconfined")
