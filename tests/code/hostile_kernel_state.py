# ruff: noqa: E501  (the hostile programs are source strings; wrapping them hurts reading them)
"""Hostile programs that pass a value through kernel state shared by all sandboxes (issue: Code RL v4).

The page cache of the shared read-only ``/usr`` and futexes keyed by a ``/usr`` file's inode outlive a
sandbox and are seen by every other one. Each case here is a channel a red team used: run one writes
a value, a later fresh sandbox (or a concurrent one) reads it back; and the code game's two runs of
one program agree on a random number through it. ``hostile_suite`` runs them with the others.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BITS = 20
STRIDE = 16  # pages between two bits: a read of one page never brings its neighbours' in
# the cases share one /usr file: one at a time, or one's writer is another's noise
ONE_AT_A_TIME = threading.Lock()

# the page-cache reader: which pages of @FILE@ are cached, without loading them (RWF_NOWAIT, mincore,
# cachestat: whichever the sandbox lets through); prints the decoded value or 'refused'
PROBE = f"""
import ctypes, mmap, os
fd = os.open('@FILE@', os.O_RDONLY)
size = os.fstat(fd).st_size
libc = ctypes.CDLL(None, use_errno=True)
try:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # a miss must not start a readahead
except OSError:
    pass
def nowait(p):
    try:
        os.preadv(fd, [bytearray(1)], p * 4096, os.RWF_NOWAIT)
        return 1
    except BlockingIOError:
        return 0
def mincore_all():
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    a = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
    vec = (ctypes.c_ubyte * ((size + 4095) // 4096))()
    if libc.mincore(ctypes.c_void_p(a), ctypes.c_size_t(size), vec) != 0:
        raise OSError(ctypes.get_errno(), 'mincore')
    return [v & 1 for v in vec]
def cached():
    try:
        return [nowait(p) for p in range(({BITS} + 1) * {STRIDE})]
    except OSError:
        return mincore_all()
"""

# the writer: evict @FILE@ from the cache, then load one page per set bit of @VALUE@
WRITE = f"""
import os
wfd = os.open('@FILE@', os.O_RDONLY)
def evict():
    os.posix_fadvise(wfd, 0, 0, os.POSIX_FADV_DONTNEED)
def load(p):
    os.posix_fadvise(wfd, 0, 0, os.POSIX_FADV_RANDOM)
    os.pread(wfd, 1, p * 4096)
def write(v):
    evict()
    for i in range({BITS}):
        if v >> i & 1:
            load((i + 1) * {STRIDE})
    load(0)
"""

READ = (
    PROBE
    + f"""
try:
    c = cached()
    print('value', sum(c[(i + 1) * {STRIDE}] << i for i in range({BITS})))
except OSError as e:
    print('refused', e)
"""
)

# The code game's cheat: the first run draws a random number and leaves it in the cache; the second
# (a fresh sandbox) finds the flag page cached and prints the same number. Where the calls are
# refused, both runs print their own random number: different, so the game calls it invalid.
CHEAT = (
    WRITE
    + PROBE
    + f"""
import random, time
def flag():
    try:
        return nowait(0)
    except OSError:
        return mincore_all()[0]
try:
    if flag():
        c = cached()
        v = sum(c[(i + 1) * {STRIDE}] << i for i in range({BITS}))
    else:
        v = random.getrandbits({BITS})
        time.sleep(0.05)  # a miss may have started reading the page: let it land before the eviction
        write(v)
except OSError:
    v = random.getrandbits({BITS})
print(v)
"""
)

# Two concurrent sandboxes map the same /usr file: a shared futex's key is (inode, offset), so a
# FUTEX_WAKE in one wakes a FUTEX_WAIT in the other. op 0/1 = FUTEX_WAIT/FUTEX_WAKE (not private).
FUTEX = """
import ctypes, mmap, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open('@FILE@', os.O_RDONLY)
a = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
word = ctypes.c_uint32.from_address(a).value
L = ctypes.c_long
class TS(ctypes.Structure):
    _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]
"""
FUTEX_WAIT = (
    FUTEX
    + """
t0 = time.monotonic()
r = libc.syscall(L(@NR@), ctypes.c_void_p(a), L(0), L(word), ctypes.byref(TS(2, 0)), L(0), L(0))
e = ctypes.get_errno()
print('woken' if r == 0 and time.monotonic() - t0 < 1.9 else 'not woken', r, e)
"""
)
FUTEX_WAKE = (
    FUTEX
    + """
n = 0
deadline = time.monotonic() + 0.8
while time.monotonic() < deadline and n <= 0:
    n = libc.syscall(L(@NR@), ctypes.c_void_p(a), L(1), L(1), L(0), L(0), L(0))
    time.sleep(0.02)
print('ESCAPED: woke a waiter in another sandbox' if n > 0 else 'none woken', n, ctypes.get_errno())
"""
)


def cold_file() -> str:
    """A regular /usr file of 2 MiB or more that nothing keeps mapped (its cached pages can be evicted)."""
    need = (BITS + 2) * STRIDE * 4096
    for p in (
        "/usr/lib/file/magic.mgc",
        "/usr/lib/python3.11/config-3.11-x86_64-linux-gnu/libpython3.11.a",
        "/usr/share/i18n/charmaps/GB18030.gz",
    ):
        if os.path.isfile(p) and os.path.getsize(p) >= need:
            return p
    for top in ("/usr/share", "/usr/lib"):
        for d, _, fs in os.walk(top):
            for f in fs:
                p = os.path.join(d, f)
                if (
                    not p.endswith(".so")
                    and os.path.isfile(p)
                    and not os.path.islink(p)
                    and os.path.getsize(p) >= need
                    and os.access(p, os.R_OK)
                ):
                    return p
    raise FileNotFoundError("no /usr file of 2 MiB to probe the page cache with")


def evict(path: str) -> None:
    """The driver (outside any sandbox) empties the file's cached pages: each case starts from cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _nr(name: str) -> int:
    import pyseccomp

    return int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))


def sub(code: str, path: str, value: int = 0) -> str:
    return code.replace("@FILE@", path).replace("@VALUE@", str(value)).replace("@NR@", str(_nr("futex")))


def page_cache_between_runs(run: Callable[[str], Any]) -> tuple[bool, str]:
    """One sandbox writes a random 20-bit value into the page cache; a fresh one reads it back."""
    with ONE_AT_A_TIME:
        path = cold_file()
        value = random.SystemRandom().getrandbits(BITS) | 1
        evict(path)
        run(sub(WRITE + "write(@VALUE@)\n", path, value))
        r = run(sub(READ, path))
        got = r.stdout.split()
        passed = len(got) >= 2 and got[0] == "value" and got[1] == str(value)
        return not passed, f"wrote {value}, read {r.stdout.strip()[-80:]!r} {r.stderr.strip()[-80:]!r}"


def page_cache_concurrent(run: Callable[[str], Any]) -> tuple[bool, str]:
    """The same channel between two sandboxes alive at once (across trainers and users too)."""
    with ONE_AT_A_TIME:
        path = cold_file()
        value = random.SystemRandom().getrandbits(BITS) | 1
        evict(path)
        writer = sub(WRITE + "import time\nwrite(@VALUE@)\ntime.sleep(1.0)\n", path, value)
        reader = "import time\ntime.sleep(0.5)\n" + sub(READ, path)
        with ThreadPoolExecutor(2) as ex:
            fw = ex.submit(run, writer)
            r = ex.submit(run, reader).result()
            fw.result()
        got = r.stdout.split()
        passed = len(got) >= 2 and got[0] == "value" and got[1] == str(value)
        return not passed, f"wrote {value}, read {r.stdout.strip()[-80:]!r}"


def futex_between_sandboxes(run: Callable[[str], Any]) -> tuple[bool, str]:
    path = cold_file()
    with ThreadPoolExecutor(2) as ex:
        fw = ex.submit(run, sub(FUTEX_WAIT, path))
        waker = ex.submit(run, "import time\ntime.sleep(0.3)\n" + sub(FUTEX_WAKE, path)).result()
        waiter = fw.result()
    escaped = "ESCAPED" in waker.stdout or "woken" in waiter.stdout.split()[:1]
    return not escaped, f"waker {waker.stdout.strip()[-60:]!r} waiter {waiter.stdout.strip()[-60:]!r}"


def game_remembers(
    play: Callable[[list[str], Callable[[list[str]], list[str]]], list[float]],
) -> tuple[bool, str]:
    """The cheat against the code game: judged invalid (-1), never a win, while a deterministic
    program the opponent mispredicts still wins (+1)."""
    with ONE_AT_A_TIME:
        path = cold_file()
        evict(path)
        rewards = play([sub(CHEAT, path), "print(6 * 7)"], lambda ps: ["<answer>0</answer>"] * len(ps))
        return rewards == [-1.0, 1.0], f"rewards {rewards} (cheat, honest)"


def called_on_usr(name: str, before: str, args: str) -> str:
    """A program calling ``name`` on a /usr file's fd ``fd`` or mapping ``a``; ESCAPED if it succeeds."""
    return (
        "import ctypes, mmap, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "libc.mmap.restype = ctypes.c_void_p\n"
        "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
        "L = ctypes.c_long\nfd = os.open('@FILE@', os.O_RDONLY)\n"
        "a = libc.mmap(None, 1 << 20, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)\n"
        f"{before}r = libc.syscall(L({_nr(name)}), {args})\n"
        "print('ESCAPED' if r >= 0 else 'refused', r, ctypes.get_errno())\n"
    )


def single_calls() -> dict[str, str]:
    """name -> program: each call that evicts, loads without reading, or probes the cache."""
    progs = {
        "fadvise_dontneed": called_on_usr("fadvise64", "", "L(fd), L(0), L(0), L(4)"),
        "readahead": called_on_usr("readahead", "", "L(fd), L(0), L(1 << 20)"),
        "preadv2_nowait": called_on_usr(
            "preadv2",
            "iov = (ctypes.c_char * 1)()\nv = (ctypes.c_void_p * 2)(ctypes.addressof(iov), 1)\n",
            "L(fd), v, L(1), L(0), L(0), L(8)",
        ),
        "preadv2_dontcache": called_on_usr(
            "preadv2",
            "iov = (ctypes.c_char * 1)()\nv = (ctypes.c_void_p * 2)(ctypes.addressof(iov), 1)\n",
            "L(fd), v, L(1), L(0), L(0), L(0x80)",
        ),
        "mincore": called_on_usr(
            "mincore", "vec = (ctypes.c_ubyte * 256)()\n", "ctypes.c_void_p(a), L(1 << 20), vec"
        ),
        "madvise_pageout": called_on_usr("madvise", "", "ctypes.c_void_p(a), L(1 << 20), L(21)"),
        "madvise_cold": called_on_usr("madvise", "", "ctypes.c_void_p(a), L(1 << 20), L(20)"),
        "madvise_willneed": called_on_usr("madvise", "", "ctypes.c_void_p(a), L(1 << 20), L(3)"),
        "futex_shared_wake": called_on_usr("futex", "", "ctypes.c_void_p(a), L(1), L(1), L(0), L(0), L(0)"),
    }
    if _nr("cachestat") >= 0:  # Linux 6.5; libseccomp 2.5.5 knows it
        progs["cachestat"] = called_on_usr(
            "cachestat",
            "rng = (ctypes.c_uint64 * 2)(0, 1 << 20)\nst = (ctypes.c_uint64 * 5)()\n",
            "L(fd), rng, st, L(0)",
        )
    return progs


# The same cheat with no call the filter can refuse: a page is loaded by touching it in a mapping
# with MADV_RANDOM (no readahead), and probed by touching a cached page of its 16-page block:
# fault-around maps the block's cached pages (no IO), which /proc/self/pagemap shows present.
# A sentinel page is never loaded: when it shows present, there is no channel (every page is
# resident) and the program prints a random number like any honest random program.
FAULT_AROUND = """
import mmap, os, random, struct
import pydoc_data
F = os.path.join(os.path.dirname(pydoc_data.__file__), 'topics.py')
fd = os.open(F, os.O_RDONLY)
m = mmap.mmap(fd, 3 * 16 * 4096, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)
base = next(int(line.split('-')[0], 16) for line in open('/proc/self/maps') if F in line)
pm = open('/proc/self/pagemap', 'rb', buffering=0)
def present(p):
    pm.seek((base // 4096 + p) * 8)
    return struct.unpack('<Q', pm.read(8))[0] >> 63
ANCHORS = (0, 8, 16, 24, 32, 40)  # every 16-page block of the mapping holds one, however aligned
FLAG, SENTINEL = 4, 5
BITS = [p for p in range(17, 48) if p % 8][:20]
def probe(pages):  # touch the anchors (fault-around maps each one's block), then read what is mapped
    for a in ANCHORS:
        m[a * 4096]
    return [present(p) for p in pages]
flag, sentinel = probe([FLAG, SENTINEL])
if sentinel:
    v = random.getrandbits(20)
elif flag:
    v = sum(b << k for k, b in enumerate(probe(BITS)))
else:
    v = random.getrandbits(20)
    for k, p in enumerate(BITS):
        if v >> k & 1:
            m[p * 4096]
    m[FLAG * 4096]
print(v)
"""


def stdlib_topics() -> str:
    """The file FAULT_AROUND uses, as the sandbox's python names it on the host (to evict it first)."""
    import subprocess

    from training_core.sandbox import detect

    out = subprocess.run(
        [detect().python, "-I", "-S", "-c", "import pydoc_data; print(pydoc_data.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    return os.path.join(os.path.dirname(out), "topics.py")


def game_remembers_by_fault_around(play: Callable[..., list[float]], pool: Any = None) -> tuple[bool, str]:
    """The fault-around cheat against the code game: invalid (-1) with the game's memory-resident
    /usr; ``pool`` = a pool on the host's /usr shows the channel it would have there."""
    with ONE_AT_A_TIME:
        evict(stdlib_topics())
        kw = {} if pool is None else {"pool": pool}
        rewards = play([FAULT_AROUND, "print(6 * 7)"], lambda ps: ["<answer>0</answer>"] * len(ps), **kw)
    return rewards == [-1.0, 1.0], f"rewards {rewards} (cheat, honest)"
