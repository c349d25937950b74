"""Which isolation this machine allows, found once by trying it; fail closed when there is none.

Model-written code runs under bubblewrap (``bwrap``, the sandbox Flatpak is built on), which sets up
with user namespaces what we would otherwise hand-roll:

- mount namespace: only ``/usr`` (read-only, plus the ``/bin``, ``/lib`` links into it) and the
  interpreter's prefix are visible; ``/tmp`` (the working directory) and ``/dev/shm`` are private,
  size-limited tmpfs that vanish with the run; everything else (``/root``, ``/home``, ``/etc``,
  ``/run``, ``/var``, the repo, other sandboxes, host unix-socket files) is simply not there; the root
  and ``/dev`` are read-only; ``/proc`` is a fresh one that shows only the sandbox's own processes,
  and of it the program reads only its own process's files (Landlock, ``procview``); no ``/sys``;
- network, IPC, UTS, cgroup and PID namespaces (the whole tree dies with the namespace's first
  process), a new session (no TIOCSTI into our terminal), all capabilities dropped, no new
  privileges, and no further user namespaces inside (``--disable-userns``);
- a seccomp filter (``seccomp``) on every process of the sandbox, for what namespaces do not cover.

Modes, best first:

1. ``bwrap-root`` (we are root): bwrap runs under an unprivileged uid of its own (from a range this
   process claims, ``uids.UidAllocator``), so RLIMIT_NPROC counts per sandbox (root is exempt from it) and
   nothing the sandbox does acts with root's rights; each run sits in its own cgroup for an aggregate
   memory cap (tmpfs pages and kernel objects included) and a process cap.
2. ``bwrap-user`` (not root, unprivileged user namespaces allowed): the same namespaces, filter and
   file system view; each run sits in its own cgroup under a subtree delegated to this user
   (``pippa_contract.cgroupdeleg``), else caps come from per-process rlimits and tmpfs sizes.
3. ``unsafe``: rlimits and a session only.

Levels (the recipe's ``sandbox.isolation``) say which modes are acceptable, and ``detect`` refuses
with one line naming what is missing rather than weaken on its own: ``strict`` (the default) needs
bwrap, the filter, Landlock and cgroup caps (``bwrap-root`` with writable cgroups, or ``bwrap-user``
in a delegated cgroup); ``rlimits`` accepts per-process caps and a kernel without Landlock; ``unsafe``
accepts mode 3.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable

from pippa_contract import cgroupdeleg
from training_core.sandbox import procview, seccomp
from training_core.sandbox.cgroups import CgroupSlots
from training_core.sandbox.launcher import Isolation, Launcher, SandboxUnavailable
from training_core.sandbox.seccomp import Filter, SeccompUnavailable
from training_core.sandbox.uids import UIDS

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user "
    "namespaces (sysctl user.max_user_namespaces > 0)"
)
CGROUP_HINT_ROOT = (
    "make the memory and pids cgroup controllers writable (container: --cgroupns=private, rw mount)"
)
CGROUP_HINT_USER = cgroupdeleg.HOW_TO
# the refusal's line names one fix, short; SandboxUnavailable.details has the long ones
SHORT_FIX = {
    CGROUP_HINT_USER: "start the trainer in a delegated cgroup (systemd-run --user --scope -p Delegate=yes)"
}


LEVELS = ("gvisor", "strict", "rlimits", "unsafe")  # recipe's sandbox.isolation, strongest first
# levels detected by a module of their own, which registers here when imported (``gvisor``: the package
# imports it); this module does not import them
LEVEL_DETECTORS: dict[str, Callable[[], Launcher]] = {}

_lock = threading.Lock()
_cached: Launcher | None = None
_level = "strict"
_cgroups: list[CgroupSlots | str] = []  # this process's one set of slots (every launcher shares it)


def process_cgroups() -> CgroupSlots | str:
    """One ``CgroupSlots`` per process (two would hand out the same slot directories), or why none."""
    if not _cgroups:
        _cgroups.append(CgroupSlots.create())
    return _cgroups[0]


def set_level(level: str) -> None:
    """The weakest isolation ``detect()`` may return (the recipe's ``sandbox.isolation``, logged):
    "strict" needs namespaces, seccomp and cgroup caps for all processes together; "rlimits" accepts
    per-process caps where no cgroup is ours; "unsafe" accepts no namespaces at all."""
    global _level, _cached
    if level not in LEVELS:
        raise ValueError(f"sandbox isolation {level!r} is not one of {', '.join(LEVELS)}")
    with _lock:
        _level = level
        _cached = None


def allow_unsafe(on: bool = True) -> None:
    """``set_level("unsafe" if on else "strict")``."""
    set_level("unsafe" if on else "strict")


def python_candidates() -> list[tuple[str, tuple[str, ...]]]:
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
    """ "" when the launcher runs a program under its filter, else what went wrong (bwrap's message)."""
    code = (
        "import os, resource, errno\ntry:\n    os.memfd_create('probe')\nexcept OSError as e:\n"
        "    print('pippa-probe-ok' if e.errno == errno.EPERM else e)"
    )
    flt = launcher.seccomp.fd() if launcher.seccomp is not None else None
    argv = [
        *launcher.prefix(1 << 20, 1 << 20, uid=user, seccomp_fd=flt),
        launcher.python,
        "-I",
        "-S",
        "-c",
        code,
    ]
    popen_user = user if launcher.setpriv is None else None
    try:
        r = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=20,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            user=popen_user,
            group=popen_user,
            extra_groups=[] if popen_user is not None else None,
            pass_fds=() if flt is None else (flt,),
        )
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        if flt is not None:
            os.close(flt)
    if r.returncode == 0 and r.stdout.strip() == "pippa-probe-ok":
        return ""
    return (
        r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [f"exit status {r.returncode}"]
    )[-1]


def detect(
    force_mode: str | None = None, allow_unsafe: bool | None = None, level: str | None = None
) -> Launcher:
    """The best launcher this machine allows at ``level`` (default: ``set_level``'s); cached after the
    first call with no arguments.

    Raises ``SandboxUnavailable`` with one line naming what is missing and how to get it when the level
    asked for cannot be met."""
    global _cached
    if allow_unsafe is not None and level is None:
        level = "unsafe" if allow_unsafe else "strict"
    with _lock:
        if _cached is not None and force_mode is None and level is None:
            return _cached
        launcher = _detect(force_mode, level or _level)
        if force_mode is None and level is None:
            _cached = launcher
        return launcher


def _unsafe() -> Launcher:
    iso = Isolation(
        "unsafe",
        False,
        False,
        False,
        False,
        "rlimit",
        "rlimit",
        (
            "UNSAFE: no namespaces; the program sees the host file system and network with the "
            "caller's rights",
        ),
        level="unsafe",
    )
    return Launcher(iso, os.path.realpath(sys.executable), None)


def _detect(force_mode: str | None, level: str) -> Launcher:
    if level not in LEVELS:
        raise ValueError(f"sandbox isolation {level!r} is not one of {', '.join(LEVELS)}")
    if force_mode == "unsafe":
        return _unsafe()
    if level in LEVEL_DETECTORS:  # gvisor: only where asked for, never a weaker level in its place
        return LEVEL_DETECTORS[level]()
    root = os.geteuid() == 0
    bwrap = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    why: list[str] = []  # every mode's reason, with its details (SandboxUnavailable.details)
    short: list[str] = []  # the same, without the details (the refusal's line names the first)
    hints: list[str] = []
    try:
        flt: Filter | None = seccomp.build()
    except SeccompUnavailable as e:
        flt = None
        why.append(str(e))
        short.append("no seccomp filter (no libseccomp binding)")
        hints.append(seccomp.INSTALL_HINT)
    if bwrap is None:
        why.append("bwrap not found")
        short.append("bwrap not found")
        hints.append(INSTALL_HINT)
    elif flt is not None:
        landlock = procview.landlock_abi()
        modes = ["bwrap-root", "bwrap-user"] if root else ["bwrap-user"]
        if force_mode is not None:
            modes = [m for m in modes if m == force_mode]
        for mode in modes:
            # root's bwrap-user stands for a user without delegation (tests); bwrap-root uses root's cgroups
            slots = process_cgroups() if mode == "bwrap-root" or not root else "root runs bwrap-root"
            cg = slots if isinstance(slots, CgroupSlots) else None
            if cg is None and level == "strict":
                short.append(f"{mode}: no cgroup to cap a run's processes together")
                why.append(f"{short[-1]} ({slots})")
                hints.append(CGROUP_HINT_ROOT if root else CGROUP_HINT_USER)
                continue
            if not landlock and level == "strict":
                why.append(f"{mode}: no Landlock to keep the machine's /proc files from the program")
                short.append(why[-1])
                hints.append(procview.HINT)
                continue
            cap = cg.kind if cg else "rlimit"
            notes: list[str] = [
                f"/proc: only the program's own process (Landlock ABI {landlock})"
                if landlock
                else "NO Landlock: the machine's /proc files are readable"
            ]
            if cg is None:
                notes.append("memory and process caps are per process (rlimits): no cgroup for this run")
            if mode == "bwrap-user":
                notes.append("runs with the caller's uid inside a user namespace")
            iso = Isolation(
                mode,
                True,
                True,
                mode == "bwrap-root",
                True,
                cap,
                cap,
                tuple(notes),
                seccomp=flt.summary(),
                level="strict" if cg and landlock else "rlimits",
            )
            for python, binds in python_candidates():
                launcher = Launcher(
                    iso,
                    python,
                    bwrap,
                    cg,
                    binds,
                    shutil.which("setpriv", path="/usr/bin:/bin") if root else None,
                    flt,
                    landlock=landlock,
                )
                err = _probe(launcher, UIDS.probe_uid if mode == "bwrap-root" else None)
                if not err:
                    return launcher
                why.append(f"{mode} with {python}: {err}")
                short.append(f"{mode} did not start a program")
        if not hints:
            hints.append(INSTALL_HINT)
    if level == "unsafe" and force_mode is None:
        return _unsafe()
    weaker = (
        '"rlimits" (per-process caps)'
        if level == "strict" and flt is not None and bwrap is not None
        else '"unsafe" (unconfined)'
    )
    fixes = list(dict.fromkeys(hints))
    raise SandboxUnavailable(
        f"no sandbox at isolation = {level}: {short[0]}; fix: "
        f"{SHORT_FIX.get(fixes[0], fixes[0])}, or set sandbox.isolation = {weaker}",
        f"isolation = {level}: {'; '.join(why)}; fixes: {'; '.join(fixes)}",
    )
