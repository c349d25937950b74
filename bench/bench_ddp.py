"""2-process DDP (gloo, CPU) vs 1 process on the tiny recipe, through ``training_core.launch`` as a run
would start: the median step time and the completions trained per second, side by side in one run,
alternating (single, ddp, single, ddp, ...) so machine load hits both alike.

Two DDP shapes: "same per-rank batch" (each rank trains the recipe's batch: twice the completions per
step, the usual way to scale out) and "same global batch" (each rank half of it: the same optimizer
step, ideally in half the time). Ratios are against one process on one thread (one core: what each
of two 1-thread ranks has), so "2 ranks" at 2.0x throughput is perfect scaling; the single process also
runs with a thread per core (the same cores as the two ranks; a loaded machine punishes torch's
spinning threads). On a CPU this measures the launch path and the all-reduce overhead, not a GPU
speed-up.

    .venv/bin/python bench/bench_ddp.py [--steps 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 256  # the tiny recipe's per_device_train_batch_size (16 prompts x 16 completions)


def one_run(
    run_dir: Path, steps: int, processes: int, per_rank_batch: int, threads: int
) -> tuple[float, float]:
    """(median seconds per step, completions per second) of one run, from its metrics.jsonl times."""
    sets = [
        f"train.max_steps={steps}",
        "eval.task=none",
        "checkpoint.every=0",
        f"train.per_device_train_batch_size={per_rank_batch}",
    ]
    argv = [sys.executable, "-m", "training_core.launch", "tiny", "--run-dir", str(run_dir)]
    for s in sets:
        argv += ["--set", s]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ACCELERATE_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = str(threads)
    if processes > 1:
        argv += ["--processes", str(processes)]
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = [r["time"] for r in recs if r["type"] == "step"]
    intervals = [b - a for a, b in itertools.pairwise(times[2:])]  # the first steps warm up
    step = statistics.median(intervals)
    return step, per_rank_batch * processes / step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cores = os.cpu_count() or 2
    half = max(1, cores // 2)
    shapes = {  # name: (processes, per-rank batch, threads per process); ratios against the first
        "1 process, 1 thread": (1, BATCH, 1),
        f"1 process, {cores} threads": (1, BATCH, cores),
        f"2 ranks x {half} thr, same per-rank batch": (2, BATCH, half),
        f"2 ranks x {half} thr, same global batch": (2, BATCH // 2, half),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in shapes}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, (procs, batch, threads) in shapes.items():
                run_dir = Path(tmp) / f"{r}-{procs}-{batch}-{threads}"
                results[name].append(one_run(run_dir, args.steps, procs, batch, threads))
    print(
        f"tiny recipe, {args.steps} steps x {args.rounds} rounds, {os.cpu_count()} cores, "
        f"{time.time() - t0:.0f} s in all (median over rounds)"
    )
    first = next(iter(results))
    base_step = statistics.median(s for s, _ in results[first])
    base_rate = statistics.median(c for _, c in results[first])
    print(f"ratios against {first!r}")
    print(f"{'':38} {'s/step':>8} {'completions/s':>14} {'step ratio':>11} {'throughput ratio':>17}")
    for name, vals in results.items():
        step = statistics.median(s for s, _ in vals)
        rate = statistics.median(c for _, c in vals)
        print(f"{name:38} {step:8.3f} {rate:14.0f} {step / base_step:10.2f}x {rate / base_rate:16.2f}x")


if __name__ == "__main__":
    main()
