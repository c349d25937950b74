"""Sandbox throughput vs bare ``subprocess.run`` of the same trivial programs, measured in one run.

Sides, alternating each round with the same number of parallel workers (default 2, the CI machine's
cores): bare ``subprocess.run([trainer python, "-c", code])``; bare ``[sandbox python, "-I", "-S",
"-c", code]`` (the same interpreter and flags as inside the sandbox: what isolation alone costs);
the sandbox with every limit on (bubblewrap namespaces, the seccomp filter and a fresh session keyring,
own uid, cgroup caps, rlimits, wall clock, output caps, tree kill); the sandbox without the per-run
cgroup (what the cgroup move costs); without the seccomp filter and keyring (what they cost); and
with the filter of the round before issue 35 (no page-cache and futex rules: what those cost); and
every code reward's sandbox (``default_pool``), whose /usr is a memory-resident copy (``resident``).
The CPU lines also measure the sandbox as it was before issue 46 (no Landlock view of /proc, no
sysinfo and mlock rules): isolation's CPU per run, now / then, goal <= 1.2; and, where runsc is
installed, a program in its own gVisor sandbox: ``runsc do`` and the gVisor level itself
(``sandbox.isolation = "gvisor"``: an OCI bundle per run, ``runsc run``, the prelude, the cgroup slot,
the cleanup), on the host's /usr and on the resident copy, beside the strict sandbox.
Goals: sandbox / bare >= 0.8; sandbox / sandbox with the earlier filter >= 0.9 (issue 35). Wall
time on a shared machine swings with its load; the CPU lines at the end (the filters on a
syscall-heavy program, the interpreter's start-up, and every process of one program through a
cpuacct cgroup) are the figures to compare across runs.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_sandbox.py [--n 200] [--workers 2] [--rounds 3] [--cpu-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from training_core.sandbox import (
    SandboxLimits,
    SandboxPool,
    SandboxUnavailable,
    detect,
    isolation,
    resident,
    run_python,
    seccomp,
)
from training_core.sandbox.launcher import Launcher

BEFORE_46 = "sandbox before issue 46"
# a program in its own gVisor sandbox, as `runsc do` starts it (the host's root read-only under a tmpfs
# overlay, no network), and the gVisor level (``training_core.sandbox.gvisor``) on each /usr
GVISOR = "runsc --rootless --ignore-cgroups --network=none do"
GVISOR_LEVEL = "gVisor level"
GVISOR_RESIDENT = "gVisor level, resident /usr"


def programs(n: int) -> list[str]:
    return [f"print(sum(range({i})))" for i in range(n)]


def bare(codes: list[str], workers: int, python: str, flags: tuple[str, ...] = ()) -> float:
    def one(code: str) -> str:
        argv = [python, *flags, "-c", code]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        outs = list(ex.map(one, codes))
    assert all(o.strip() for o in outs)
    return len(codes) / (time.perf_counter() - t0)


def sandboxed(codes: list[str], pool: SandboxPool) -> float:
    t0 = time.perf_counter()
    results = pool.map(codes)
    assert all(r.ok and r.stdout.strip() for r in results), [r for r in results if not r.ok][:1]
    return len(codes) / (time.perf_counter() - t0)


# syscalls a filter sees most: futex (lock hand-offs between threads), madvise (malloc), stat, getppid
HEAVY = (
    "import os, threading, time\nt0 = time.process_time()\nlock = threading.Lock()\nn = [0]\n"
    "def work():\n    for _ in range(20000):\n        with lock:\n            n[0] += 1\n"
    "        os.getppid()\n        os.stat('/tmp')\n"
    "ts = [threading.Thread(target=work) for _ in range(4)]\nfor t in ts:\n    t.start()\n"
    "for t in ts:\n    t.join()\nfor _ in range(200):\n    b = bytearray(1 << 20)\n    del b\n"
    "print(time.process_time() - t0)"
)


STARTUP = "import time\nprint(time.process_time())"  # the interpreter's CPU time from its start


def heavy(launcher: Launcher, earlier: Launcher, resident: Launcher, rounds: int) -> None:
    """The filters on a syscall-heavy program (160,000 syscalls, lock hand-offs between 4 threads),
    alternating: the new rules' cost where a filter's cost shows most; and the interpreter's start-up
    on the host's /usr and on the resident copy. The program's own CPU time (user + system,
    where the filter runs), which a loaded machine disturbs far less than wall time."""
    best = {"new filter": float("inf"), "earlier filter": float("inf")}
    start = {"host /usr": float("inf"), "resident /usr": float("inf")}
    limits = SandboxLimits(timeout_s=60.0, max_processes=32)
    for _ in range(rounds * 2):
        for name, lau in (("new filter", launcher), ("earlier filter", earlier)):
            r = run_python(HEAVY, limits, lau)
            assert r.ok, r.stderr[-500:]
            best[name] = min(best[name], float(r.stdout))
        for name, lau in (("host /usr", launcher), ("resident /usr", resident)):
            r = run_python(STARTUP, limits, lau)
            assert r.ok, r.stderr[-500:]
            start[name] = min(start[name], float(r.stdout))
    host, res = start["host /usr"] * 1000, start["resident /usr"] * 1000
    print(
        f"interpreter start-up, CPU time, best of {rounds * 2}: host /usr {host:.1f} ms, resident /usr "
        f"{res:.1f} ms"
    )
    new, old = best["new filter"] * 1000, best["earlier filter"] * 1000
    print(
        f"syscall-heavy program, CPU time, best of {rounds * 2}: new filter {new:.0f} ms, earlier filter "
        f"{old:.0f} ms, ratio of throughput "
        f"{best['earlier filter'] / best['new filter']:.2f} (goal >= 0.90)"
    )


def cpu_per_run(sides: dict[str, Launcher | list[str] | None], n: int, rounds: int) -> None:
    """CPU time of every process one program takes (the trainer's work, setpriv, bwrap, its namespace
    init, the interpreter), which load disturbs far less than wall time: this process and all it starts
    sit in a cpuacct cgroup of their own (cgroup v1, root: what this machine allows), whose usage counts
    the processes no one waits for too. A side None is bare ``python -I -S``; isolation's cost per run
    is a sandbox side minus it; a side that is an argv is run as it is (gVisor's ``runsc do``). Sides
    alternate, best of each."""
    acct = Path(f"/sys/fs/cgroup/cpuacct/pippa-bench-{os.getpid()}")
    try:
        acct.mkdir()
        (acct / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as e:
        print(f"CPU per program: not measured (a cpuacct cgroup of its own: {e.strerror}; root on cgroup v1)")
        return
    limits = SandboxLimits()
    best = dict.fromkeys(sides, float("inf"))
    python = next(lau.python for lau in sides.values() if isinstance(lau, Launcher))
    try:
        for _ in range(rounds):
            for name, lau in sides.items():
                u0 = int((acct / "cpuacct.usage").read_text())
                for _ in range(n):
                    if lau is None or isinstance(lau, list):
                        argv = [*(lau or []), python, "-I", "-S", "-c", "print(1)"]
                        assert subprocess.run(argv, capture_output=True, timeout=30).stdout.strip() == b"1"
                    else:
                        assert run_python("print(1)", limits, lau).ok
                best[name] = min(best[name], (int((acct / "cpuacct.usage").read_text()) - u0) / n / 1e6)
    finally:
        (acct.parent / "cgroup.procs").write_text(str(os.getpid()))
        acct.rmdir()
    bare_ms = best.get("bare python -I -S", 0.0)
    for name, ms in best.items():
        extra = f", isolation {ms - bare_ms:.1f} ms" if name != "bare python -I -S" else ""
        print(f"CPU per program, all its processes, {name}: {ms:.1f} ms{extra} (best of {rounds} x {n})")
    if GVISOR in best:
        print(
            f"a program in its own gVisor sandbox ({GVISOR}) / in the strict sandbox, CPU per run: "
            f"{best[GVISOR] / best['sandbox']:.2f}"
        )
    if GVISOR_LEVEL in best:
        print(
            f"CPU per run, {GVISOR_LEVEL} / strict sandbox = {best[GVISOR_LEVEL] / best['sandbox']:.2f}; "
            f"{GVISOR_RESIDENT} / strict sandbox, resident /usr (the code rewards' pool) = "
            f"{best[GVISOR_RESIDENT] / best['sandbox, resident /usr']:.2f}"
        )
    if BEFORE_46 in best and "sandbox" in best:
        ratio = (best["sandbox"] - bare_ms) / (best[BEFORE_46] - bare_ms)
        print(
            f"isolation CPU per run, sandbox / {BEFORE_46} = {ratio:.2f} (goal <= 1.20: Landlock and "
            f"the machine-state rules)"
        )


def throughput(
    launcher: Launcher,
    plain: Launcher,
    no_filter: Launcher,
    earlier: Launcher,
    on_copy: Launcher,
    args: argparse.Namespace,
) -> None:
    """Programs per second on each side, alternating rounds (wall time: the machine's load shows)."""
    print(f"sandbox python: {launcher.python}\nbare python: {sys.executable}")
    codes = programs(args.n)
    sides = (
        "bare",
        "bare -I -S",
        "sandbox",
        "sandbox, no cgroup",
        "sandbox, no seccomp",
        "sandbox, earlier filter",
        "sandbox, resident /usr",
    )
    best = dict.fromkeys(sides, 0.0)
    with (
        SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=launcher) as pool,
        SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=plain) as pool_plain,
        SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=no_filter) as pool_no_filter,
        SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=earlier) as pool_earlier,
        SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=on_copy) as pool_resident,
    ):
        pool.map(codes[:4])  # warm
        for r in range(args.rounds):
            got = {
                "bare": bare(codes, args.workers, sys.executable),
                "sandbox": sandboxed(codes, pool),
                "bare -I -S": bare(codes, args.workers, launcher.python, ("-I", "-S")),
                "sandbox, no cgroup": sandboxed(codes, pool_plain),
                "sandbox, no seccomp": sandboxed(codes, pool_no_filter),
                "sandbox, earlier filter": sandboxed(codes, pool_earlier),
                "sandbox, resident /usr": sandboxed(codes, pool_resident),
            }
            best = {k: max(best[k], v) for k, v in got.items()}
            print(
                f"round {r + 1}: "
                + "  ".join(f"{k} {v:6.1f}/s" for k, v in got.items())
                + f"  ratio {got['sandbox'] / got['bare']:.2f}"
            )
    print("best: " + ", ".join(f"{k} {v:.1f} prog/s" for k, v in best.items()))
    print(f"sandbox / bare subprocess.run = {best['sandbox'] / best['bare']:.2f} (goal >= 0.80)")
    print(f"sandbox / bare python -I -S = {best['sandbox'] / best['bare -I -S']:.2f} (isolation alone)")
    vs_earlier = best["sandbox"] / best["sandbox, earlier filter"]
    print(
        f"sandbox / sandbox with the earlier filter = {vs_earlier:.2f} (goal >= 0.90: the page-cache and "
        f"futex rules)"
    )
    print(
        f"code rewards' sandbox (resident /usr) / sandbox on the host's /usr = "
        f"{best['sandbox, resident /usr'] / best['sandbox']:.2f} (goal >= 0.90)"
    )
    per_run = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["bare -I -S"])
    cgroup = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["sandbox, no cgroup"])
    filt = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["sandbox, no seccomp"])
    print(
        f"isolation cost per run: {per_run:.1f} ms, of which the cgroup move {cgroup:.1f} ms and the "
        f"seccomp filter with the fresh keyring {filt:.1f} ms ({args.workers} workers)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="programs per round and side")
    ap.add_argument("--workers", type=int, default=2, help="parallel programs on each side")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each side counts")
    ap.add_argument("--cpu-only", action="store_true", help="only the CPU per program lines")
    args = ap.parse_args()
    launcher = detect()
    plain = dataclasses.replace(launcher, cgroups=None)
    no_filter = dataclasses.replace(launcher, seccomp=None)
    earlier = dataclasses.replace(launcher, seccomp=seccomp.build(kernel_state=False))
    on_copy = resident(launcher)
    # the sandbox before issue 46: no Landlock view of /proc, no sysinfo and mlock rules
    before_46 = dataclasses.replace(launcher, landlock=0, seccomp=seccomp.build(machine_state=False))
    print(launcher.isolation.header())
    if not args.cpu_only:
        throughput(launcher, plain, no_filter, earlier, on_copy, args)
        heavy(launcher, earlier, on_copy, args.rounds)
    cpu_sides: dict[str, Launcher | list[str] | None] = {
        "bare python -I -S": None,
        "sandbox": launcher,
        "sandbox, earlier filter": earlier,
        "sandbox, resident /usr": on_copy,
        "sandbox, no seccomp": no_filter,
        "sandbox, no cgroup": plain,
        BEFORE_46: before_46,
    }
    if runsc := shutil.which("runsc"):
        # --ignore-cgroups: its sandbox and gofer stay in this process's cgroup, where their CPU is counted
        cpu_sides[GVISOR] = [runsc, "--rootless", "--ignore-cgroups", "--network=none", "do", "--quiet"]
        try:
            gv = isolation.detect(level="gvisor")
        except SandboxUnavailable as e:
            print(f"gVisor level: not measured ({e})")
        else:
            cpu_sides[GVISOR_LEVEL] = gv
            cpu_sides[GVISOR_RESIDENT] = resident(gv)
    else:
        print("gVisor: not measured (no runsc; Debian: apt-get install runsc)")
    cpu_per_run(cpu_sides, 40, args.rounds)


if __name__ == "__main__":
    main()
