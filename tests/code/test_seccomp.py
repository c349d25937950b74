"""Each syscall the seccomp filter denies is denied inside a real sandbox (issue: Code RL v3).

One probe program calls every denied syscall through ``libc.syscall`` with arguments an unfiltered
kernel answers differently (a success, EFAULT, EBADF, ESRCH): the same probe runs once under the
filter and once in the same sandbox without it (the control), so a pass shows the filter did it.
Some syscalls check capabilities before anything else (reboot, init_module, ...): there the control
says EPERM too and the filter's part cannot be told apart on this kernel; those cases still assert
that the call is refused, and ``test_what_only_capabilities_refuse_is_named`` lists them.
"""

from __future__ import annotations

import dataclasses
import errno
import json
from functools import cache
from typing import Any

import pyseccomp
import pytest

from training_core.sandbox import SandboxLimits, Status, detect, run_python
from training_core.sandbox import seccomp as sc_mod

LIMITS = SandboxLimits(timeout_s=10.0, max_processes=16)
BAD = 1  # a pointer no kernel can read
F = {
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

# name -> (syscall, arguments); "@usr" an fd of a shared /usr file, "@tmp" the /tmp directory's fd,
# "@file" a tmpfs file's path, strings are passed as C strings
CALLS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "keyctl": ("keyctl", (0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "keyctl_join_named": ("keyctl", (1, "pippa-shared")),  # join a named keyring: a channel
    "add_key": ("add_key", ("user", "pippa", "x", 1, -3)),
    "request_key": ("request_key", ("user", "pippa-nothing", 0, 0)),
    "inotify_init": ("inotify_init", ()),
    "inotify_init1": ("inotify_init1", (0,)),
    "inotify_add_watch": ("inotify_add_watch", (-1, "/usr", 1)),
    "fanotify_init": ("fanotify_init", (0x200, 0)),  # FAN_REPORT_FID: allowed unprivileged since 5.13
    "fanotify_mark": ("fanotify_mark", (-1, 0, 0, -100, BAD)),
    "flock": ("flock", ("@usr", 1)),
    **{
        f"fcntl_{k}": ("fcntl", ("@usr" if k != "F_NOTIFY" else "@tmp", v, BAD if "LK" in k else 0))
        for k, v in F.items()
    },
    "fcntl_F_SETLK_high_bits": ("fcntl", ("@usr", (1 << 32) | 6, BAD)),  # the kernel reads an int
    "memfd_create": ("memfd_create", ("x", 0)),
    "memfd_secret": ("memfd_secret", (0,)),
    "shmget": ("shmget", (0, 4096, 0o600)),
    "shmat": ("shmat", (-1, 0, 0)),
    "msgget": ("msgget", (0, 0o600)),
    "semget": ("semget", (0, 1, 0o600)),
    "setxattr": ("setxattr", ("@file", "user.x", "y", 1, 0)),
    "lsetxattr": ("lsetxattr", ("@file", "user.x", "y", 1, 0)),
    "fsetxattr": ("fsetxattr", (-1, "user.x", "y", 1, 0)),
    "getxattr": ("getxattr", ("@file", "user.x", BAD, 0)),
    "lgetxattr": ("lgetxattr", ("@file", "user.x", BAD, 0)),
    "fgetxattr": ("fgetxattr", (-1, "user.x", BAD, 0)),
    "listxattr": ("listxattr", ("@file", 0, 0)),
    "llistxattr": ("llistxattr", ("@file", 0, 0)),
    "flistxattr": ("flistxattr", (-1, 0, 0)),
    "removexattr": ("removexattr", ("@file", "user.x")),
    "lremovexattr": ("lremovexattr", ("@file", "user.x")),
    "fremovexattr": ("fremovexattr", (-1, "user.x")),
    "setxattrat": (463, (-100, BAD, 0, BAD, BAD, 0)),
    "getxattrat": (464, (-100, BAD, 0, BAD, BAD, 0)),
    "listxattrat": (465, (-100, BAD, 0, BAD, 0)),
    "removexattrat": (466, (-100, BAD, 0, BAD)),
    "io_uring_setup": ("io_uring_setup", (1, BAD)),
    "io_uring_enter": ("io_uring_enter", (-1, 0, 0, 0, 0, 0)),
    "io_uring_register": ("io_uring_register", (-1, 0, 0, 0)),
    "userfaultfd": ("userfaultfd", (1,)),  # UFFD_USER_MODE_ONLY: allowed unprivileged
    "perf_event_open": ("perf_event_open", (BAD, 0, -1, -1, 0)),
    "bpf": ("bpf", (0, BAD, 8)),
    "ptrace": ("ptrace", (2, 999999, 0, 0)),  # PEEKDATA of no process
    "process_vm_readv": ("process_vm_readv", (999999, 0, 0, 0, 0, 0)),
    "process_vm_writev": ("process_vm_writev", (999999, 0, 0, 0, 0, 0)),
    "kcmp": ("kcmp", (999999, 999999, 0, 0, 0)),
    "pidfd_getfd": ("pidfd_getfd", (-1, 0, 0)),
    "mount": ("mount", (BAD, BAD, BAD, 0, 0)),
    "umount2": ("umount2", ("/tmp", 0)),
    "pivot_root": ("pivot_root", (BAD, BAD)),
    "chroot": ("chroot", (BAD,)),
    "fsopen": ("fsopen", (BAD, 0)),
    "fsconfig": ("fsconfig", (-1, 0, 0, 0, 0)),
    "fsmount": ("fsmount", (-1, 0, 0)),
    "fspick": ("fspick", (-100, BAD, 0)),
    "move_mount": ("move_mount", (-1, BAD, -1, BAD, 0)),
    "open_tree": ("open_tree", (-100, BAD, 0)),
    "mount_setattr": ("mount_setattr", (-100, BAD, 0, BAD, 0)),
    "open_by_handle_at": ("open_by_handle_at", (-1, BAD, 0)),
    "name_to_handle_at": ("name_to_handle_at", (-100, BAD, BAD, BAD, 0)),
    "unshare": ("unshare", (0,)),  # a no-op that succeeds unfiltered
    "setns": ("setns", (-1, 0)),
    "clone_newuser": ("clone", (0x10000000 | 17, 0, 0, 0, 0)),  # CLONE_NEWUSER | SIGCHLD
    "clone3": ("clone3", (BAD, 88)),
    "personality": ("personality", (0xFFFFFFFF,)),  # a query, answered unfiltered
    "kexec_load": ("kexec_load", (0, 0, 0, 0)),
    "kexec_file_load": ("kexec_file_load", (-1, -1, 0, 0, 0)),
    "init_module": ("init_module", (BAD, 0, BAD)),
    "finit_module": ("finit_module", (-1, BAD, 0)),
    "delete_module": ("delete_module", (BAD, 0)),
    "reboot": ("reboot", (0, 0, 0, 0)),
    "swapon": ("swapon", (BAD, 0)),
    "swapoff": ("swapoff", (BAD,)),
    "syslog": ("syslog", (10, 0, 0)),
    "acct": ("acct", (0,)),
    "quotactl": ("quotactl", (0, BAD, 0, 0)),
    "iopl": ("iopl", (0,)),
    "ioperm": ("ioperm", (0, 0, 0)),
    "settimeofday": ("settimeofday", (0, 0)),
    "clock_settime": ("clock_settime", (0, BAD)),
    "clock_adjtime": ("clock_adjtime", (0, BAD)),
    "adjtimex": ("adjtimex", (BAD,)),
    "vhangup": ("vhangup", ()),
    "ioctl_TIOCSTI": ("ioctl", (0, 0x5412, BAD)),
    "ioctl_TIOCLINUX": ("ioctl", (0, 0x541C, BAD)),
    # the page cache of shared files and futexes keyed by their inodes (issue: Code RL v4)
    "fadvise64": ("fadvise64", ("@usr", 0, 0, 4)),  # POSIX_FADV_DONTNEED: an eviction
    "readahead": ("readahead", ("@usr", 0, 4096)),
    "mincore": ("mincore", (BAD, 4096, BAD)),
    "cachestat": ("cachestat", ("@tmpf", BAD, BAD, 0)),
    "process_madvise": ("process_madvise", (-1, 0, 0, 0, 0)),
    "futex_waitv": ("futex_waitv", (0, 0, 0, 0, 0)),
    "futex_requeue": ("futex_requeue", (0, 0, 0, 0)),
    "preadv2_RWF_NOWAIT": ("preadv2", ("@usr", BAD, 1, 0, 0, 8)),
    "preadv2_RWF_DONTCACHE": ("preadv2", ("@usr", BAD, 1, 0, 0, 0x80)),
    "pwritev2_RWF_NOWAIT": ("pwritev2", ("@tmpf", BAD, 1, 0, 0, 8 | 0x10)),  # | RWF_APPEND
    "madvise_MADV_PAGEOUT": ("madvise", (0, 4096, 21)),
    "madvise_MADV_COLD": ("madvise", (0, 4096, 20)),
    "madvise_MADV_WILLNEED": ("madvise", (0, 4096, 3)),
    # an aligned address nothing maps: EFAULT unfiltered
    "futex_shared_wake": ("futex", (8, 1, 1, 0, 0, 0)),  # FUTEX_WAKE without FUTEX_PRIVATE_FLAG
    "futex_shared_wait": ("futex", (8, 0, 0, 0, 0, 0)),
    "futex_wake_shared": ("futex_wake", (8, 1, 1, 2)),  # FUTEX2_SIZE_U32, not FUTEX2_PRIVATE
}

PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
open('/tmp/f', 'w').close()
fds = {'@usr': os.open('/usr/bin/env', os.O_RDONLY), '@tmp': os.open('/tmp', os.O_RDONLY),
       '@tmpf': os.open('/tmp/f', os.O_RDWR)}
def arg(a):
    if a in fds:
        return ctypes.c_long(fds[a])
    if a == '@file':
        return b'/tmp/f'
    if isinstance(a, str):
        return a.encode()
    return ctypes.c_long(a)
out = {}
for name, (nr, args) in CALLS.items():
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    if name.startswith('clone') and r == 0:
        os._exit(0)  # the child of a clone that went through
    out[name] = 0 if r >= 0 else ctypes.get_errno()
print(json.dumps(out))
"""


def _nr(syscall: str | int) -> int:
    return syscall if isinstance(syscall, int) else pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, syscall)


def _expected(name: str) -> int:
    syscall = CALLS[name][0]
    if isinstance(syscall, int):
        syscall = {v: k for k, v in sc_mod._BY_NUMBER.items()}[syscall]
    for _group, names, err in sc_mod.DENIED:
        if syscall in names and syscall != "keyctl":
            return err
    return {n: e for n, _what, e in sc_mod.CONDITIONAL}[syscall]


@cache
def _probe(filtered: bool) -> dict[str, int]:
    launcher = detect(level="rlimits")
    if not filtered:
        launcher = dataclasses.replace(launcher, seccomp=None)
    calls = {name: (_nr(s), args) for name, (s, args) in CALLS.items() if _nr(s) >= 0}
    r = run_python(f"CALLS = {calls!r}\n" + PROBE, LIMITS, launcher)
    assert r.status is Status.OK, r.stderr[-2000:]
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_denied(name: str) -> None:
    if _nr(CALLS[name][0]) < 0:
        pytest.skip(f"{CALLS[name][0]} does not exist on this architecture")
    got = _probe(True)[name]
    want = _expected(name)
    assert got == want, f"{name}: {errno.errorcode.get(got, got)}, want {errno.errorcode[want]}"
    if _probe(False)[name] != want:
        return  # the control answered otherwise: the filter is what refused it
    assert name in CAPABILITY_FIRST, f"{name}: the control refused it the same way (see CAPABILITY_FIRST)"


# refused by the kernel's capability checks before it reads any argument, with or without the filter
CAPABILITY_FIRST = {
    "acct",
    "fsmount",
    "fsopen",
    "fspick",
    "move_mount",
    "pivot_root",
    "reboot",
    "settimeofday",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "vhangup",
}


def test_what_only_capabilities_refuse_is_named() -> None:
    """The control (no filter) shows which denials this kernel would also make on its own."""
    filtered, control = _probe(True), _probe(False)
    same = {n for n in CALLS if n in filtered and control[n] == filtered[n]}
    assert same <= CAPABILITY_FIRST, sorted(same - CAPABILITY_FIRST)
    # and most denials are the filter's own doing (a control that refuses everything proves nothing)
    assert len(CALLS) - len(same) >= 60, sorted(same)


def test_the_filter_is_installed() -> None:
    code = "import re\nprint(re.search(r'Seccomp:\\s+(\\d)', open('/proc/self/status').read()).group(1))"
    r = run_python(code, LIMITS, detect(level="rlimits"))
    assert r.ok and r.stdout.split() == ["2"]  # SECCOMP_MODE_FILTER


KEYRING_HELPER = r"""
import ctypes, dataclasses, sys, uuid
import pyseccomp
from training_core.sandbox import detect, run_python
nr = lambda name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
desc = "pippa-secret-" + uuid.uuid4().hex
ring = ("pippa-ring-" + uuid.uuid4().hex).encode()
assert libc.syscall(L(nr("keyctl")), L(1), ring) > 0  # this helper joins a session keyring of its own
key = libc.syscall(L(nr("add_key")), b"user", desc.encode(), b"s3cret", L(6), L(-3))
assert key > 0 and libc.syscall(L(nr("keyctl")), L(5), L(key), L(0x3F000000)) == 0  # possessor-only
launcher = detect(force_mode="bwrap-user", level="rlimits")  # /proc/keys lists only keys of mapped uids
if sys.argv[1] == "control":  # the same filter, without the prelude's join or Landlock (hides /proc/keys)
    launcher = dataclasses.replace(launcher, seccomp=dataclasses.replace(launcher.seccomp, keyctl_nr=-1),
                                   landlock=0)
elif sys.argv[1] == "join only":  # the prelude's join alone: a fresh keyring where /proc/keys is readable
    launcher = dataclasses.replace(launcher, landlock=0)
r = run_python("print(open('/proc/keys').read())", launcher=launcher)
print("visible" if desc in r.stdout else "hidden")
"""


def test_the_sandbox_has_a_fresh_session_keyring() -> None:
    """A helper process puts a possessor-only key in its session keyring and starts a sandbox: only a
    process that possesses (inherited) that keyring sees the key in /proc/keys. Without the prelude's
    join (the control) the sandbox does; with it, not. The helper's keyring dies with the helper. In a
    user namespace, /proc/keys lists only keys whose owner is mapped there: the helper's are in
    ``bwrap-user`` mode (same uid), not in ``bwrap-root`` (the run's own uid), so the probe uses the
    former; the prelude's join is the same in both."""
    import subprocess
    import sys

    got = {}
    for side in ("control", "join only", "sandbox"):
        r = subprocess.run(
            [sys.executable, "-c", KEYRING_HELPER, side], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr[-2000:]
        got[side] = r.stdout.split()[-1]
    assert got == {"control": "visible", "join only": "hidden", "sandbox": "hidden"}


def test_ordinary_programs_still_run_under_the_filter() -> None:
    """Threads, subprocesses (clone3 falls back to clone), shutil.copy2 (xattrs unsupported), sqlite."""
    code = (
        "import shutil, sqlite3, subprocess, threading\n"
        "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
        "print(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "open('a', 'w').write('x')\nshutil.copy2('a', 'b')\nprint(open('b').read())\n"
        "db = sqlite3.connect(':memory:')\nprint(db.execute('select 6 * 7').fetchone()[0])\n"
        "import multiprocessing.pool\nprint(sum(multiprocessing.pool.ThreadPool(2).map(abs, [-1, -2])))"
    )
    r = run_python(code, LIMITS, detect(level="rlimits"))
    assert r.ok, r.stderr[-1000:]
    assert r.stdout.split() == ["thread", "child", "x", "42", "3"]


def test_a_foreign_abi_syscall_does_not_get_through() -> None:
    """x32 syscalls (number | 0x40000000) would skip a filter keyed on x86_64 numbers: libseccomp's
    architecture check kills the process instead (or the kernel has no x32 at all: ENOSYS)."""
    if pyseccomp.system_arch() != pyseccomp.Arch.X86_64:
        pytest.skip("x86_64 only")
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(ctypes.c_long(0x40000000 | 250), ctypes.c_long(0), ctypes.c_long(-3), 0)\n"
        "print(r, ctypes.get_errno())"
    )
    r = run_python(code, LIMITS, detect(level="rlimits"))
    assert r.status is Status.KILLED or r.stdout.split() == ["-1", str(errno.ENOSYS)], r


NUMPY_THREADS = r"""
import sys
sys.path.insert(0, SITE)
import os, threading, time
os.environ.setdefault('OPENBLAS_NUM_THREADS', '4')
import numpy as np
a = np.random.default_rng(0).standard_normal((300, 300))
t0 = time.monotonic()
for _ in range(20):
    b = a @ a  # OpenBLAS's worker threads: glibc's private futexes, and pthread_join at exit
results = []
def same():
    results.append(float((a @ a).sum()) == float(b.sum()))
ts = [threading.Thread(target=same) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
import multiprocessing as mp
with mp.get_context('fork').Pool(2) as pool:  # process-shared semaphores: shared futexes, spun on
    squares = pool.map(abs, [-1, -2, -3])
print(all(results), len(results), squares, round(time.monotonic() - t0, 2))
"""


def test_numpy_threads_and_process_pools_run_under_the_filter() -> None:
    """glibc's pthreads use private futexes; what waits on a shared one (pthread_join, a process-shared
    semaphore) gets EINVAL, which glibc answers by checking its word again: slower, never broken."""
    import os
    import site
    import sys

    launcher = detect(force_mode="bwrap-user", level="rlimits")  # the venv may sit under a 0700 /root
    real = os.path.realpath(sys.executable)
    site_dir = next(p for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "numpy")))
    binds = tuple(dict.fromkeys((os.path.realpath(sys.base_prefix), site_dir)))
    launcher = dataclasses.replace(launcher, python=real, extra_ro=binds)
    limits = dataclasses.replace(LIMITS, total_memory_mb=2048, memory_mb=2048, max_processes=64)
    r = run_python(f"SITE = {site_dir!r}\n" + NUMPY_THREADS, limits, launcher)
    assert r.ok, r.stderr[-2000:]
    assert r.stdout.split()[:5] == ["True", "4", "[1,", "2,", "3]"], r.stdout
