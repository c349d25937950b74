"""What a sandboxed program may read: its own files and its own process, nothing machine-wide.

A fresh ``/proc`` shows only the sandbox's processes, but its other files (``meminfo``, ``vmstat``,
``stat``, ``loadavg``, ``pressure/*``, ``sys/fs/*``, ``keys``, ...) and parts of each process's own
directory (``net/``, whose counters are partly global; ``mountinfo``, which names host paths) show the
machine: gauges one sandbox moves and another reads (the ``Mlocked`` and ``Shmem`` figures), counters
that carry a value to a later run (``unevictable_pgs_mlocked``). Closing them file by file never ends,
so the sandbox reads by an allow list instead: the prelude restricts itself with Landlock (Linux 5.13+,
unprivileged, inherited by every process it starts) so that a file can be read only under the
sandbox's own mounts (``/usr``, ``/tmp``, ``/dev``) and among ``PROC_SELF``, the per-process files of
the program's first process. Everything else under ``/proc`` answers EACCES, including whatever a
newer kernel adds. Directory listings stay open (names, not state); ``/sys`` is not mounted at all.
A process the program starts reads no ``/proc`` file (its own directory is not on the list).
"""

from __future__ import annotations

import ctypes
import os

# per-process files of the program's first process a program may read: its memory, limits, status,
# scheduling figures and file descriptors; not net/ (global counters), mountinfo/mounts/mountstats
# (host paths), task/ (each thread's copy of all of these), autogroup, sessionid, loginuid (host ids)
PROC_SELF = (
    "status",
    "stat",
    "statm",
    "maps",
    "smaps",
    "smaps_rollup",
    "cmdline",
    "comm",
    "environ",
    "limits",
    "cgroup",
    "fdinfo",
    "pagemap",
    "io",
    "auxv",
    "wchan",
    "sched",
    "schedstat",
    "personality",
    "oom_score",
    "oom_adj",
    "oom_score_adj",
    "cpuset",
    "uid_map",
    "gid_map",
    "setgroups",
    "numa_maps",
    "timerslack_ns",
    "coredump_filter",
    "attr",
    "mem",
)
SANDBOX_ROOTS = ("/usr", "/tmp", "/dev")  # the sandbox's own mounts (/bin, /lib link into /usr)
LANDLOCK_CREATE_RULESET = 444  # asm-generic numbers, the same on x86_64 and aarch64
HINT = (
    "a kernel with Landlock (Linux 5.13 or later with landlock in its lsm= list; Ubuntu 22.04 and "
    "Debian 12 kernels have it)"
)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none (a kernel without it, or lsm= without it)."""
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    version = syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def readable(extra: tuple[str, ...]) -> str:
    """The prelude's argument: the roots a sandboxed program may read files under, ``|``-joined."""
    roots = [*SANDBOX_ROOTS, *extra]
    roots += [
        f"/{top}"
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
        if os.path.isdir(f"/{top}") and not os.path.islink(f"/{top}")
    ]
    return "|".join(dict.fromkeys(roots))
