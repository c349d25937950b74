"""Which isolation this machine allows, found once by trying it.

Order of preference (first that really runs a probe program wins):

1. ``unshare-root`` (we are root): new network, PID, IPC and UTS namespaces via util-linux
   ``unshare``, and the program runs under its own unprivileged uid/gid (no supplementary groups).
   Root must drop privileges: RLIMIT_NPROC is not enforced for root and root may signal or ptrace
   the trainer. The PID namespace is what makes cleanup airtight: when the namespace's first
   process exits or is killed, the kernel kills every process in it, so ``setsid`` or a double fork
   cannot leave a survivor, and ``kill()`` cannot name any process outside the namespace.
2. ``unshare-user`` (not root, unprivileged user namespaces allowed): same namespaces inside a new
   user namespace. File writes are not confined beyond what the caller may write.
3. ``setuid`` (root without usable namespaces): own uid, rlimits, a session; no network isolation.
4. ``plain``: rlimits and a session only. ``Isolation.notes`` says what is missing.

The interpreter is probed too: the sandbox uid must be able to execute it, and a trainer venv under
``/root`` is not reachable by an unprivileged uid, so a system ``python3`` may be used instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass

# Unprivileged uids handed to concurrent sandboxes, one each, so RLIMIT_NPROC counts per sandbox
# (the kernel counts processes per real uid). Chosen above typical login uids and below 65534.
UID_BASE = 61000
UID_COUNT = 512


@dataclass(frozen=True)
class Isolation:
    """What was applied to a sandboxed run; tests and logs read it, nothing is assumed."""

    mode: str  # unshare-root | unshare-user | setuid | plain
    network: bool  # True when the program had no network (empty network namespace)
    pid_namespace: bool  # True when the whole process tree dies with the program
    uid_dropped: bool  # True when the program ran under its own unprivileged uid
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launcher:
    """How to start the sandboxed interpreter: ``prefix`` goes before the interpreter argv."""

    isolation: Isolation
    python: str
    unshare: str | None

    def prefix(self, uid: int | None) -> list[str]:
        if self.isolation.mode == "unshare-root":
            assert self.unshare is not None and uid is not None
            return [self.unshare, "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
                    "--setuid", str(uid), "--setgid", str(uid)]
        if self.isolation.mode == "unshare-user":
            assert self.unshare is not None
            return [self.unshare, "--user", "--map-root-user", "--net", "--pid", "--ipc", "--uts",
                    "--fork", "--kill-child"]
        return []

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


def _python_candidates() -> list[str]:
    seen: list[str] = []
    base = getattr(sys, "_base_executable", sys.executable)
    for p in (sys.executable, base, "/usr/bin/python3", "/usr/local/bin/python3",
              shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if p:
            real = os.path.realpath(p)
            if os.path.isfile(real) and real not in seen:
                seen.append(real)
    return seen


def _probe(prefix: list[str], python: str, user: int | None) -> bool:
    """True when ``prefix + python`` runs a program that sees no network interface but ``lo``."""
    code = "import os, resource; print('pippa-probe-ok')"
    try:
        r = subprocess.run([*prefix, python, "-I", "-S", "-c", code], capture_output=True, text=True,
                           timeout=20, cwd="/", env={"PATH": "/usr/bin:/bin"},
                           user=user, group=user, extra_groups=[] if user is not None else None)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == "pippa-probe-ok"


def detect(force_mode: str | None = None) -> Launcher:
    """The best launcher this machine allows; cached after the first call (``force_mode`` bypasses)."""
    global _cached
    with _lock:
        if _cached is not None and force_mode is None:
            return _cached
        launcher = _detect(force_mode)
        if force_mode is None:
            _cached = launcher
        return launcher


def _detect(force_mode: str | None) -> Launcher:
    root = os.geteuid() == 0
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    modes: list[Isolation] = []
    if unshare and root:
        modes.append(Isolation("unshare-root", True, True, True))
    if unshare:
        modes.append(Isolation("unshare-user", True, True, False,
                               ("files writable by the caller are writable by the program",)))
    if root:
        modes.append(Isolation("setuid", False, False, True,
                               ("no network namespace: unshare unavailable",
                                "no PID namespace: a setsid'd child could outlive its group")))
    modes.append(Isolation("plain", False, False, False,
                           ("no network namespace", "no PID namespace", "runs as the caller's uid")))
    if force_mode is not None:
        modes = [m for m in modes if m.mode == force_mode]
    probe_uid = UID_BASE + UID_COUNT  # a uid never handed to a run
    for iso in modes:
        for python in _python_candidates():
            launcher = Launcher(iso, python, unshare)
            if iso.mode == "setuid":
                ok = _probe([], python, probe_uid)
            else:
                ok = _probe(launcher.prefix(probe_uid), python, None)
            if ok:
                return launcher
    raise RuntimeError(f"no sandbox mode works here (tried {[m.mode for m in modes]})")
