"""Sandbox throughput vs bare ``subprocess.run`` of the same trivial programs, measured in one run.

Sides, alternating each round with the same number of parallel workers (default 2, the CI machine's
cores): bare ``subprocess.run([trainer python, "-c", code])``; bare ``[sandbox python, "-I", "-S",
"-c", code]`` (the same interpreter and flags as inside the sandbox: what isolation alone costs);
the sandbox with every limit on (bubblewrap namespaces, the seccomp filter and a fresh session keyring,
own uid, cgroup caps, rlimits, wall clock, output caps, tree kill); the sandbox without the per-run
cgroup (what the cgroup move costs); without the seccomp filter and keyring (what they cost); and
with the filter of the round before issue 35 (no page-cache and futex rules: what those cost).
Goals: sandbox / bare >= 0.8; sandbox / sandbox with the earlier filter >= 0.9 (issue 35).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_sandbox.py [--n 200] [--workers 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from training_core.sandbox import SandboxLimits, SandboxPool, detect, seccomp


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="programs per round and side")
    ap.add_argument("--workers", type=int, default=2, help="parallel programs on each side")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each side counts")
    args = ap.parse_args()
    launcher = detect()
    plain = dataclasses.replace(launcher, cgroups=None)
    no_filter = dataclasses.replace(launcher, seccomp=None)
    earlier = dataclasses.replace(launcher, seccomp=seccomp.build(kernel_state=False))
    print(launcher.isolation.header())
    print(f"sandbox python: {launcher.python}\nbare python: {sys.executable}")
    codes = programs(args.n)
    sides = ("bare", "bare -I -S", "sandbox", "sandbox, no cgroup", "sandbox, no seccomp",
             "sandbox, earlier filter")
    best = dict.fromkeys(sides, 0.0)
    with SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=launcher) as pool, \
            SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=plain) as pool_plain, \
            SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=no_filter) as pool_no_filter, \
            SandboxPool(workers=args.workers, limits=SandboxLimits(), launcher=earlier) as pool_earlier:
        pool.map(codes[:4])  # warm
        for r in range(args.rounds):
            got = {"bare": bare(codes, args.workers, sys.executable),
                   "sandbox": sandboxed(codes, pool),
                   "bare -I -S": bare(codes, args.workers, launcher.python, ("-I", "-S")),
                   "sandbox, no cgroup": sandboxed(codes, pool_plain),
                   "sandbox, no seccomp": sandboxed(codes, pool_no_filter),
                   "sandbox, earlier filter": sandboxed(codes, pool_earlier)}
            best = {k: max(best[k], v) for k, v in got.items()}
            print(f"round {r + 1}: " + "  ".join(f"{k} {v:6.1f}/s" for k, v in got.items())
                  + f"  ratio {got['sandbox'] / got['bare']:.2f}")
    print("best: " + ", ".join(f"{k} {v:.1f} prog/s" for k, v in best.items()))
    print(f"sandbox / bare subprocess.run = {best['sandbox'] / best['bare']:.2f} (goal >= 0.80)")
    print(f"sandbox / bare python -I -S = {best['sandbox'] / best['bare -I -S']:.2f} (isolation alone)")
    vs_earlier = best["sandbox"] / best["sandbox, earlier filter"]
    print(f"sandbox / sandbox with the earlier filter = {vs_earlier:.2f} (goal >= 0.90: the page-cache and "
          f"futex rules)")
    per_run = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["bare -I -S"])
    cgroup = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["sandbox, no cgroup"])
    filt = args.workers * 1000 * (1 / best["sandbox"] - 1 / best["sandbox, no seccomp"])
    print(f"isolation cost per run: {per_run:.1f} ms, of which the cgroup move {cgroup:.1f} ms and the "
          f"seccomp filter with the fresh keyring {filt:.1f} ms ({args.workers} workers)")


if __name__ == "__main__":
    main()
