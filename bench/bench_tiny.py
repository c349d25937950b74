"""The main job's learning claim and its time, over seeds and thread counts: what docs/training.md quotes.

Runs ``python -m training_core.train tiny`` once per (seed, thread setting), one run at a time so
each has the machine to itself, and prints per run: wall time of the whole command, training time
(first logged step to the end line, evals included), greedy accuracy on the eval problems at the
start and at the end, the best constant answer's accuracy on the same problems, and the margin
(end accuracy minus that baseline). The last line gives the smallest margin and the slowest run.
A claim that holds on one machine may be luck of its rounding: another CPU runs other vector kernels
(AVX-512 instead of AVX2), and other thread counts can split reductions differently. ``--kernels``
emulates the first with the libraries' own switches (KERNEL_VARIANTS below), ``--threads`` the second
(OMP_NUM_THREADS). Seen on a 2-core AMD EPYC: on the tiny model neither the thread count nor
ATEN_CPU_CAPABILITY alone changes a bit of the run (its matrices are too small to split); MKL's
switches do change the GEMM rounding, and with it every trajectory.

    .venv/bin/python bench/bench_tiny.py [--seeds 0,1,2,3,4] [--threads 1,default] \
        [--kernels native,plain,compat]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Kernel variants by name: environment settings that make torch/MKL compute the same model with other
# instructions, so other rounding (Intel's MKL_ENABLE_INSTRUCTIONS and MKL_CBWR, ATen's CPU capability).
KERNEL_VARIANTS: dict[str, dict[str, str]] = {
    "native": {},
    "plain": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "compat": {"MKL_CBWR": "COMPATIBLE"},
}


def one_run(seed: int, threads: str, kernels: str, sets: list[str], tmp: Path) -> dict[str, Any]:
    run_dir = tmp / f"seed{seed}-t{threads}-{kernels}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    for name in ("OMP_NUM_THREADS", *(k for v in KERNEL_VARIANTS.values() for k in v)):
        env.pop(name, None)
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    env.update(KERNEL_VARIANTS[kernels])
    argv = [sys.executable, "-m", "training_core.train", "tiny", "--run-dir", str(run_dir)]
    for s in [f"seed={seed}", "checkpoint.every=0", "logging.progress=false", *sets]:
        argv += ["--set", s]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit("bench_tiny: " + run_dir.name + " failed:\n" + proc.stdout + proc.stderr)
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps = [r for r in recs if r["type"] == "step"]
    evals = [r for r in recs if r["type"] == "eval"]
    return {
        "seed": seed,
        "threads": threads,
        "kernels": kernels,
        "wall_s": wall,
        "train_s": recs[-1]["time"] - steps[0]["time"] + steps[0]["perf/step_time_s"],
        "start": evals[0]["eval/accuracy"],
        "end": evals[-1]["eval/accuracy"],
        "baseline": evals[-1]["eval/constant_baseline"],
        "problems": evals[-1]["eval/n_problems"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--threads", default="1,default", help="OMP_NUM_THREADS settings; 'default' unsets it")
    p.add_argument("--kernels", default="native,plain,compat", help=f"of {', '.join(KERNEL_VARIANTS)}")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    print(f"cpu: {os.cpu_count()} cores; tiny recipe, one run at a time")
    row = "{:>4} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>7}"
    print(row.format("seed", "threads", "kernels", "wall s", "train s", "start", "end", "const", "margin"))
    with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
        grid = itertools.product(args.threads.split(","), args.kernels.split(","), seeds)
        for threads, kernels, seed in grid:
            r = one_run(seed, threads, kernels, args.sets, Path(tmp))
            rows.append(r)
            margin = r["end"] - r["baseline"]
            print(
                row.format(
                    seed,
                    threads,
                    kernels,
                    f"{r['wall_s']:.1f}",
                    f"{r['train_s']:.1f}",
                    f"{r['start']:.3f}",
                    f"{r['end']:.3f}",
                    f"{r['baseline']:.3f}",
                    f"{margin:+.3f}",
                ),
                flush=True,
            )
    worst = min(rows, key=lambda r: r["end"] - r["baseline"])
    slowest = max(rows, key=lambda r: r["train_s"])
    print(
        f"{len(rows)} runs on {rows[0]['problems']} distinct problems: smallest margin "
        f"{worst['end'] - worst['baseline']:+.3f} (seed {worst['seed']}, threads {worst['threads']}, "
        f"kernels {worst['kernels']}); "
        f"slowest training {slowest['train_s']:.1f} s, wall {slowest['wall_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
