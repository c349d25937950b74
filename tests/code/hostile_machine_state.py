# ruff: noqa: E501  (the hostile programs are source strings; wrapping them hurts reading them)
"""Hostile programs that pass a value through machine-wide state (issue: Code RL v5).

A global counter (``/proc/vmstat``'s ``unevictable_pgs_mlocked``, moved by ``mlock`` by an exact
amount) carries a value from one fresh sandbox to a later one; gauges (``/proc/meminfo``'s ``Mlocked``
and ``Shmem``, the latter moved by plain writes to the sandbox's own ``/tmp``) carry one between two
sandboxes alive at once; per-user kernel accounting (pending signals, message-queue bytes) is shared
by every sandbox of one host user; ``/proc/keys``, ``sysinfo(2)`` and ``mountinfo`` show the host. Each
case is contained when the value does not arrive; ``GAME`` are the same channels as code-game cheats.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from training_core.sandbox.procview import PROC_SELF

Run = Callable[[str], Any]

# open every file under /proc and /sys (without following links out of them) and say which opened
SURVEY = """
import json, os
me = os.getpid()
opened, seen = [], 0
for top in ('/proc', '/sys'):
    for d, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            seen += 1
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.close(fd)
            opened.append(p)
print(json.dumps({'me': me, 'seen': seen, 'opened': opened[:400], 'total': len(opened),
                  'sys': os.path.exists('/sys'), 'cpus': os.cpu_count()}))
"""
# links in a process's own directory that resolve to the sandbox's own files (its fds, /usr's python)
# or to its own namespaces (nsfs: opening one gives a handle setns would take, and setns is refused)
OWN_LINKS = ("fd", "exe", "cwd", "root", "map_files", "ns")


def own(path: str, me: int) -> bool:
    """``path`` is one of the program's own per-process files (``PROC_SELF``) or links, also
    as seen through one of its threads (``task/<tid>/``)."""
    own = f"/proc/{me}/"
    if not path.startswith(own):
        return False
    parts = path[len(own) :].split("/")
    if parts[0] == "task" and len(parts) > 2:
        parts = parts[2:]
    return parts[0] in PROC_SELF or parts[0] in OWN_LINKS


def survey(run: Run) -> tuple[bool, str]:
    """Every file under the sandbox's /proc and /sys: which a program can open that are not its own."""
    r = run(SURVEY)
    try:
        got = json.loads(r.stdout)
    except ValueError:
        return False, f"no survey: {r.status} {r.stdout[-80:]!r} {r.stderr[-160:]!r}"
    machine_wide = [p for p in got["opened"] if not own(p, got["me"])]
    return machine_wide == [] and not got["sys"], f"{got['seen']} files seen, opened {machine_wide[:6]}"


# read a figure of /proc/vmstat or /proc/meminfo: prints "value N" or "refused ..."
READ = """
def figure(path, name):
    for line in open(path):
        parts = line.split()
        if parts[0].rstrip(':') == name:
            return int(parts[1])
try:
    print('value', figure('@FILE@', '@NAME@'))
except OSError as e:
    print('refused', e)
"""

# lock and unlock one page @VALUE@ times: unevictable_pgs_mlocked grows by exactly that
MLOCK = """
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
buf = mmap.mmap(-1, 4096)
addr = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
done = 0
for _ in range(@VALUE@):
    if libc.mlock(addr, ctypes.c_size_t(4096)) != 0:
        break
    libc.munlock(addr, ctypes.c_size_t(4096))
    done += 1
print('locked', done)
"""

# hold @VALUE@ KiB locked (Mlocked) or written to /tmp (Shmem) for 1.2 s
HOLD_MLOCKED = """
import ctypes, mmap, time
libc = ctypes.CDLL(None, use_errno=True)
buf = mmap.mmap(-1, @VALUE@ * 1024)
addr = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print('locked', libc.mlock(addr, ctypes.c_size_t(@VALUE@ * 1024)), ctypes.get_errno(), flush=True)
time.sleep(1.2)
"""
HOLD_SHMEM = """
import time
with open('/tmp/fill', 'wb') as f:
    f.write(b'x' * (@VALUE@ * 1024))
time.sleep(1.2)
"""

# the number of real-time signals this process can queue to itself before EAGAIN (RLIMIT_SIGPENDING is
# counted per host user across namespaces); @HOLD@ > 0: queue that many and keep them pending 1.2 s
SIGPENDING = """
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
n = 0
while n < (@HOLD@ or 400000) and libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) == 0:
    n += 1
print('queued', n, flush=True)
if @HOLD@:
    time.sleep(1.2)
"""

# the number of 80 KiB message queues this process can open (RLIMIT_MSGQUEUE, per host user); @HOLD@ > 0:
# open that many and keep them 1.2 s
MQUEUE = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long), ('cur', ctypes.c_long), ('pad', ctypes.c_long * 4)]
n = 0
while n < (@HOLD@ or 4096):
    a = Attr(0, 10, 8192, 0)
    if libc.mq_open(b'/q%d' % n, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(a)) < 0:
        break
    n += 1
print('queued', n, flush=True)
if @HOLD@:
    time.sleep(1.2)
"""

SINGLE = {
    "proc_keys": "try:\n    print('ESCAPED', len(open('/proc/keys').read()))\nexcept OSError as e:\n    print('refused', e)\n",
    "sysinfo": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(256)\n"
        "print('ESCAPED' if libc.sysinfo(buf) == 0 else 'refused', ctypes.get_errno())\n"
    ),
    "mlock": (
        "import ctypes, mmap\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = mmap.mmap(-1, 4096)\n"
        "a = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buf)))\n"
        "print('ESCAPED' if libc.mlock(a, ctypes.c_size_t(4096)) == 0 else 'refused', ctypes.get_errno())\n"
    ),
    "mountinfo_host_path": "try:\n    print('ESCAPED', open('/proc/self/mountinfo').read()[:80])\nexcept OSError as e:\n    print('refused', e)\n",
    "uptime_loadavg_file_nr": (
        "for p in ('/proc/uptime', '/proc/loadavg', '/proc/sys/fs/file-nr', '/proc/sys/fs/dentry-state', '/proc/cgroups', '/proc/pressure/memory'):\n"
        "    try:\n        print('ESCAPED', p, open(p).read()[:40])\n    except OSError as e:\n        print('refused', p, e.errno)\n"
    ),
}


def _value(stdout: str, word: str) -> int | None:
    parts = stdout.split()
    return int(parts[parts.index(word) + 1]) if word in parts and parts[-1].lstrip("-").isdigit() else None


def mlock_counter_between_runs(run: Run) -> tuple[bool, str]:
    """Three fresh sandboxes: one reads the counter, one moves it by a random amount, one reads it."""
    value = random.SystemRandom().randrange(200, 600)
    read = READ.replace("@FILE@", "/proc/vmstat").replace("@NAME@", "unevictable_pgs_mlocked")
    before = run(read).stdout
    wrote = run(MLOCK.replace("@VALUE@", str(value))).stdout
    after = run(read).stdout
    a, b = _value(before, "value"), _value(after, "value")
    escaped = a is not None and b is not None and b - a == value
    return (
        not escaped,
        f"moved by {value} ({wrote.strip()}); read {before.strip()[:60]!r} then {after.strip()[:60]!r}",
    )


def gauge_concurrent(name: str, hold: str, kib: int) -> Callable[[Run], tuple[bool, str]]:
    """A reader reads a /proc/meminfo gauge before and while a concurrent sandbox holds ``kib`` KiB. On a
    busy test machine the other cases move the gauge too, so reading it at all is the escape (a
    protocol with frames carried 12 bits per 1.4 s at load 5-9)."""

    def channel(run: Run) -> tuple[bool, str]:
        reader = (
            READ.replace("@FILE@", "/proc/meminfo").replace("@NAME@", name)
            + "import time\ntime.sleep(1.0)\n"
            + READ.replace("@FILE@", "/proc/meminfo").replace("@NAME@", name)
        )
        with ThreadPoolExecutor(2) as ex:
            fr = ex.submit(run, reader)
            time.sleep(0.3)
            fw = ex.submit(run, hold.replace("@VALUE@", str(kib)))
            r, w = fr.result(), fw.result()
        got = [int(x) for x in r.stdout.split()[1::2] if x.isdigit()] if "refused" not in r.stdout else []
        escaped = len(got) == 2
        return not escaped, f"held {kib} KiB ({w.stdout.strip()[:40]!r}); read {r.stdout.strip()[:80]!r}"

    return channel


def accounting_concurrent(prog: str, hold: int) -> Callable[[Run], tuple[bool, str]]:
    """How much a sandbox can take of a per-user resource, alone and while another holds ``hold``."""

    def channel(run: Run) -> tuple[bool, str]:
        probe = prog.replace("@HOLD@", "0")
        alone = _value(run(probe).stdout, "queued")
        with ThreadPoolExecutor(2) as ex:
            fw = ex.submit(run, prog.replace("@HOLD@", str(hold)))
            time.sleep(0.5)
            during = _value(run(probe).stdout, "queued")
            held = _value(fw.result().stdout, "queued")
        escaped = alone is not None and during is not None and held and alone - during == held
        return not escaped, f"alone {alone}, while another holds {held}: {during}"

    return channel


CHANNELS: dict[str, Callable[[Run], tuple[bool, str]]] = {
    "proc_and_sys_survey": survey,
    "mlock_counter_between_runs": mlock_counter_between_runs,
    "mlocked_gauge_concurrent": gauge_concurrent("Mlocked", HOLD_MLOCKED, 4096),
    "shmem_gauge_concurrent": gauge_concurrent("Shmem", HOLD_SHMEM, 8192),
    "sigpending_accounting": accounting_concurrent(SIGPENDING, 777),
    "msgqueue_accounting": accounting_concurrent(MQUEUE, 3),
}

# code-game cheats: print a value read from (or left in) machine-wide state, else a random number
# (invalid); each wins a round where the channel works
GAME = {
    "mlock_counter": """
import ctypes, mmap, random
M = 4096
try:
    c = [int(l.split()[1]) for l in open('/proc/vmstat') if l.startswith('unevictable_pgs_mlocked ')][0]
    if c % M >= M // 2:  # a first run left its value here
        v = c % M - M // 2
    else:
        v = random.randrange(M // 2)
        libc = ctypes.CDLL(None, use_errno=True)
        buf = mmap.mmap(-1, 4096)
        a = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
        for _ in range((M // 2 + v - c) % M):
            libc.mlock(a, ctypes.c_size_t(4096))
            libc.munlock(a, ctypes.c_size_t(4096))
except (OSError, IndexError):
    v = random.getrandbits(40)
print(v)
""",
    "proc_keys": "import random, zlib\ntry:\n    print(zlib.crc32(open('/proc/keys', 'rb').read()))\nexcept OSError:\n    print(random.getrandbits(40))\n",
    "sysinfo_totalram": (
        "import ctypes, random\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = (ctypes.c_ulong * 16)()\n"
        "print(buf[4] if libc.sysinfo(buf) == 0 else random.getrandbits(40))\n"
    ),
    "mountinfo_usr": (
        "import random, zlib\ntry:\n    print(zlib.crc32(open('/proc/self/mountinfo', 'rb').read()))\n"
        "except OSError:\n    print(random.getrandbits(40))\n"
    ),
    "meminfo_memtotal": (
        "import random\ntry:\n    print(open('/proc/meminfo').readline().split()[1])\n"
        "except OSError:\n    print(random.getrandbits(40))\n"
    ),
    "boot_id": (
        "import random\ntry:\n    print(int(open('/proc/sys/kernel/random/boot_id').read().replace('-', ''), 16) % 10**9)\n"
        "except OSError:\n    print(random.getrandbits(40))\n"
    ),
}
