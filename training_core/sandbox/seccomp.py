"""The seccomp filter every sandboxed process runs under, built with libseccomp and handed to bwrap.

Namespaces hide the host, but some kernel objects are not namespaced or are shared through the files
all sandboxes see: the session keyring (``keyctl``, and ``request_key``, which makes the host run
``/sbin/request-key`` helpers as root), locks and inotify watches on the shared read-only ``/usr``
(a channel between concurrent sandboxes, and a view of what others import), memory that RLIMIT_AS
does not count (SysV shared memory, memfds, tmpfs extended attributes), and kernel interfaces with a
long history of escapes (io_uring, userfaultfd, perf, bpf, ptrace, the mount API, new namespaces).
The filter lets everything else through and answers each of these with an error (``DENIED``), so a
program sees an ordinary failure, never a crash of its interpreter.

Built with libseccomp (through ``pyseccomp``, ctypes over the system's ``libseccomp.so.2``), the
library systemd, Docker and Flatpak use: it emits the architecture check (a foreign-ABI syscall
kills the process) and compares 32-bit arguments on their low half only, as the kernel reads them.
bwrap installs it (``--seccomp FD``) after it has set the sandbox up, right before exec.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any

INSTALL_HINT = (
    "pip install 'pyseccomp>=0.1.2,<0.2' into the trainer's environment (it is in pippa's "
    "[train] extra) and install libseccomp2 (Debian/Ubuntu: apt-get install libseccomp2)"
)

# Linux's clone flags that make new namespaces (clone(2)); CLONE_NEWTIME only exists for clone3/unshare
_CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# fcntl(2) commands that lock or watch a file: F_GETLK, F_SETLK, F_SETLKW, the OFD ones, leases, dnotify
_FCNTL_LOCKS = {
    "F_GETLK": 5,
    "F_SETLK": 6,
    "F_SETLKW": 7,
    "F_OFD_GETLK": 36,
    "F_OFD_SETLK": 37,
    "F_OFD_SETLKW": 38,
    "F_SETLEASE": 1024,
    "F_GETLEASE": 1025,
    "F_NOTIFY": 1026,
}
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C  # push bytes into a terminal's input queue; console tricks
# preadv2/pwritev2 flags (arg 5): RWF_NOWAIT answers EAGAIN for an uncached page (a probe of the page
# cache that loads nothing), RWF_DONTCACHE drops the pages it read (an eviction)
_RWF = {"RWF_NOWAIT": 0x08, "RWF_DONTCACHE": 0x80}
# madvise advice that evicts, pages out, loads without a read, or reshapes a file's cached pages;
# MADV_DONTNEED (4) stays: glibc's malloc and numpy return memory with it, and on a file mapping it only
# unmaps this process's view. MADV_FREE (8) stays too: anonymous memory only.
_MADV = {
    "MADV_WILLNEED": 3,
    "MADV_REMOVE": 9,
    "MADV_COLD": 20,
    "MADV_PAGEOUT": 21,
    "MADV_POPULATE_READ": 22,
    "MADV_POPULATE_WRITE": 23,
    "MADV_COLLAPSE": 25,
    "MADV_HWPOISON": 100,
    "MADV_SOFT_OFFLINE": 101,
}
# futex ops without this bit are shared: keyed by (inode, offset) for a file mapping, whatever the
# namespace. glibc's own locks are private; pthread_join and process-shared semaphores wait shared and
# re-check their word when the wait returns EINVAL (glibc tolerates it), so they spin instead of sleep.
FUTEX_PRIVATE_FLAG = 128  # FUTEX2_PRIVATE has the same value (futex_wake/futex_wait's flags)
KEYCTL_JOIN_SESSION_KEYRING = 1
# syscalls newer than the libseccomp Debian 12 ships (2.5.4): asm-generic numbers, shared by x86_64
# and aarch64 since Linux 5.1's unified table. Linux 6.13 added the *xattrat family.
_BY_NUMBER = {
    "setxattrat": 463,
    "getxattrat": 464,
    "listxattrat": 465,
    "removexattrat": 466,
    "cachestat": 451,
    "futex_waitv": 449,
    "futex_wake": 454,
    "futex_wait": 455,
    "futex_requeue": 456,
}

# (group, syscalls, errno): what each denial answers. EOPNOTSUPP for xattrs and ENOLCK for locks are
# what a file system without them says, so ordinary code (shutil.copy2, sqlite) takes its fallback.
DENIED: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("kernel keyrings", ("keyctl", "add_key", "request_key"), errno.EPERM),
    (
        "file watches",
        ("inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark"),
        errno.EPERM,
    ),
    ("file locks", ("flock",), errno.ENOLCK),
    (
        "memory outside RLIMIT_AS",
        ("memfd_create", "memfd_secret", "shmget", "shmat", "msgget", "semget"),
        errno.EPERM,
    ),
    (
        "extended attributes",
        (
            "setxattr",
            "lsetxattr",
            "fsetxattr",
            "getxattr",
            "lgetxattr",
            "fgetxattr",
            "listxattr",
            "llistxattr",
            "flistxattr",
            "removexattr",
            "lremovexattr",
            "fremovexattr",
            "setxattrat",
            "getxattrat",
            "listxattrat",
            "removexattrat",
        ),
        errno.EOPNOTSUPP,
    ),
    ("io_uring", ("io_uring_setup", "io_uring_enter", "io_uring_register"), errno.ENOSYS),
    (
        "page cache of shared files",
        ("fadvise64", "readahead", "mincore", "cachestat", "process_madvise"),
        errno.EPERM,
    ),
    # sysinfo(2) answers the machine's free, shared and buffered memory, its load and uptime; locked
    # pages move the global unevictable and Mlocked counters (RLIMIT_MEMLOCK 0 holds MAP_LOCKED too)
    (
        "machine-wide counters",
        ("sysinfo", "mlock", "mlock2", "munlock", "mlockall", "munlockall"),
        errno.EPERM,
    ),
    # the waiters' flags sit in memory a filter cannot read; glibc does not use them
    ("futexes by vector", ("futex_waitv", "futex_requeue"), errno.ENOSYS),
    (
        "tracing and kernel programs",
        (
            "userfaultfd",
            "perf_event_open",
            "bpf",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "kcmp",
            "pidfd_getfd",
        ),
        errno.EPERM,
    ),
    (
        "mounts",
        (
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "move_mount",
            "open_tree",
            "mount_setattr",
            "open_by_handle_at",
            "name_to_handle_at",
        ),
        errno.EPERM,
    ),
    ("namespaces", ("unshare", "setns"), errno.EPERM),
    (
        "machine",
        (
            "personality",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "reboot",
            "swapon",
            "swapoff",
            "syslog",
            "acct",
            "quotactl",
            "iopl",
            "ioperm",
            "settimeofday",
            "clock_settime",
            "clock_adjtime",
            "adjtimex",
            "vhangup",
        ),
        errno.EPERM,
    ),
)
# denied only with some arguments: (syscall, what, errno)
CONDITIONAL = (
    ("keyctl", "every operation but joining a new anonymous session keyring", errno.EPERM),
    ("fcntl", "lock, lease and dnotify commands: " + ", ".join(_FCNTL_LOCKS), errno.ENOLCK),
    ("clone", "new namespaces: " + ", ".join(_CLONE_NEW), errno.EPERM),
    (
        "clone3",
        "always (its flags sit in memory a filter cannot read; libc falls back to clone)",
        errno.ENOSYS,
    ),
    ("ioctl", "TIOCSTI, TIOCLINUX", errno.EPERM),
    ("preadv2", "with " + ", ".join(_RWF), errno.EPERM),
    ("pwritev2", "with " + ", ".join(_RWF), errno.EPERM),
    ("madvise", ", ".join(_MADV), errno.EPERM),
    ("futex", "shared operations (no FUTEX_PRIVATE_FLAG)", errno.EINVAL),
    ("futex_wait", "shared (no FUTEX2_PRIVATE)", errno.EINVAL),
    ("futex_wake", "shared (no FUTEX2_PRIVATE)", errno.EINVAL),
)
# "cachestat": Linux 6.5, libseccomp 2.5.5; futex_wait/futex_wake: Linux 6.7, libseccomp 2.6


class SeccompUnavailable(Exception):
    """pyseccomp or libseccomp.so.2 is missing, or the filter could not be built."""


@dataclass(frozen=True)
class Filter:
    """A compiled filter (classic BPF, what bwrap's ``--seccomp`` reads) and what it denies."""

    bpf: bytes
    denied: tuple[str, ...]  # every syscall answered with an error whatever its arguments
    conditional: tuple[str, ...]  # "syscall: which calls" for the argument-dependent denials
    library: str  # "libseccomp via pyseccomp 0.1.2"
    keyctl_nr: int  # keyctl's number here: the prelude joins a fresh session keyring through it

    def summary(self) -> str:
        """One line for the run header."""
        return f"seccomp ({self.library}): denies {', '.join(self.denied)}; " + "; ".join(self.conditional)

    def fd(self) -> int:
        """A pipe's read end holding the program, for one bwrap (it reads to EOF); the caller closes it."""
        r, w = os.pipe()
        try:
            os.write(w, self.bpf)  # a few KiB: fits the pipe's buffer, never blocks
        finally:
            os.close(w)
        return r


# the groups that close kernel state shared between sandboxes (issue 35); ``build(kernel_state=False)``
# leaves them out, for bench_sandbox's side-by-side with the filter before them
KERNEL_STATE = ("page cache of shared files", "futexes by vector")
MACHINE_STATE = ("machine-wide counters",)  # issue 46; ``build(machine_state=False)``: a bench baseline


def build(kernel_state: bool = True, machine_state: bool = True) -> Filter:
    """The filter for this machine's native architecture; ``SeccompUnavailable`` says what is missing.
    ``kernel_state=False`` / ``machine_state=False``: without the page-cache and futex rules / the
    sysinfo and mlock rules (a benchmark's baselines only)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, AttributeError, RuntimeError) as e:  # pyseccomp loads the .so on import
        raise SeccompUnavailable(f"no libseccomp binding ({type(e).__name__}: {e})") from e
    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        low32 = 0xFFFFFFFF  # the kernel reads these arguments as 32-bit ints: compare the low half only
        denied: list[str] = []
        for group, names, err in DENIED:
            if (group in KERNEL_STATE and not kernel_state) or (group in MACHINE_STATE and not machine_state):
                continue
            for name in names:
                if name == "keyctl":
                    continue  # below, with its one allowed operation
                nr = _number(sc, name)
                if nr is None:
                    continue  # not on this architecture (e.g. iopl on aarch64)
                flt.add_rule(sc.ERRNO(err), nr)
                denied.append(name)
        # keyctl: the prelude joins a fresh anonymous session keyring (name NULL); nothing else
        flt.add_rule(sc.ERRNO(errno.EPERM), "keyctl", sc.Arg(0, sc.NE, KEYCTL_JOIN_SESSION_KEYRING))
        flt.add_rule(sc.ERRNO(errno.EPERM), "keyctl", sc.Arg(1, sc.NE, 0))
        for cmd in _FCNTL_LOCKS.values():
            flt.add_rule(sc.ERRNO(errno.ENOLCK), "fcntl", sc.Arg(1, sc.MASKED_EQ, low32, cmd))
        for bit in _CLONE_NEW.values():
            flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for req in (_TIOCSTI, _TIOCLINUX):
            flt.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, low32, req))
        for name in ("preadv2", "pwritev2") if kernel_state else ():
            for bit in _RWF.values():
                flt.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(5, sc.MASKED_EQ, bit, bit))
        for advice in _MADV.values() if kernel_state else ():
            flt.add_rule(sc.ERRNO(errno.EPERM), "madvise", sc.Arg(2, sc.MASKED_EQ, low32, advice))
        private = FUTEX_PRIVATE_FLAG
        if kernel_state:
            flt.add_rule(sc.ERRNO(errno.EINVAL), "futex", sc.Arg(1, sc.MASKED_EQ, private, 0))
        for name in ("futex_wait", "futex_wake") if kernel_state else ():  # flags: their 4th argument
            if (nr := _number(sc, name)) is not None:
                flt.add_rule(sc.ERRNO(errno.EINVAL), nr, sc.Arg(3, sc.MASKED_EQ, private, 0))
        keyctl_nr = sc.resolve_syscall(sc.Arch.NATIVE, "keyctl")
        bpf = _export(flt)
        version = _library_version()
    except (OSError, ValueError, RuntimeError, AttributeError) as e:
        raise SeccompUnavailable(f"could not build the filter ({type(e).__name__}: {e})") from e
    return Filter(
        bpf, tuple(denied), tuple(f"{name}: {what}" for name, what, _ in CONDITIONAL), version, keyctl_nr
    )


def _number(sc: Any, name: str) -> int | str | None:
    """What to hand libseccomp for ``name``: its name where the library knows it, else its number
    from ``_BY_NUMBER`` (newer than the library), else None (not on this architecture)."""
    try:
        known = sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0
    except (ValueError, OSError):
        known = False
    if known:
        return name
    return _BY_NUMBER.get(name)


def _export(flt: object) -> bytes:
    fd = os.memfd_create("pippa-seccomp", 0)
    with os.fdopen(fd, "w+b") as f:
        flt.export_bpf(f)  # type: ignore[attr-defined]
        f.seek(0)
        return f.read()


def _library_version() -> str:
    try:
        return f"libseccomp via pyseccomp {metadata.version('pyseccomp')}"
    except metadata.PackageNotFoundError:
        return "libseccomp via pyseccomp"
