"""SFT then GRPO against GRPO alone on the tiny task, at the same optimizer-step budget, over seeds.

Per seed, through the real CLI (``python -m training_core.train``), one run at a time:
  - GRPO alone: ``tiny`` for BUDGET steps;
  - SFT then GRPO: ``sft_tiny`` for N steps, then ``tiny --set model.from_run=<that run>`` for
    BUDGET - N steps, starting from the SFT run's newest checkpoint (model and char tokenizer).
The budget counts optimizer steps, and a step of either method trains on 256 sequences (SFT: 256
(prompt, answer) rows; GRPO: 16 prompts x 16 sampled answers), so SFT steps are not bigger steps; they
are cheaper (no sampling), and the training seconds of both arms are printed too. Each row prints the
end's greedy accuracy on the 41 distinct training sums (eval/accuracy), the SFT checkpoint's accuracy
where GRPO takes over, the margin of SFT->GRPO over GRPO alone and their ratio; the last lines give
the means, the smallest margin and the best constant answer's accuracy (what ignoring the prompt gets).

    .venv/bin/python bench/bench_sft_grpo.py [--seeds 0,1,2] [--sft-steps 50,100] [--budget 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def train(recipe: str, run_dir: Path, sets: list[str], threads: str) -> dict[str, Any]:
    """One run through the CLI; its start and end evals and its training seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.pop("OMP_NUM_THREADS", None)
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    argv = [sys.executable, "-m", "training_core.train", recipe, "--run-dir", str(run_dir)]
    for s in ["logging.progress=false", "eval.interval=0", *sets]:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_sft_grpo: {run_dir.name} failed:\n{proc.stdout}{proc.stderr}")
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps = [r for r in recs if r["type"] == "step"]
    evals = [r for r in recs if r["type"] == "eval"]
    return {
        "start": evals[0]["eval/accuracy"],
        "end": evals[-1]["eval/accuracy"],
        "baseline": evals[-1]["eval/constant_baseline"],
        # first step line to the end line, minus the evals' own time
        "train_s": recs[-1]["time"] - steps[0]["time"] - sum(e["eval/time_s"] for e in evals[1:]),
    }


def sft_then_grpo(seed: int, n_sft: int, budget: int, threads: str, tmp: Path) -> tuple[dict[str, Any], ...]:
    sft_id = f"sft-s{seed}-n{n_sft}"
    sft = train(
        "sft_tiny",
        tmp / sft_id,
        [f"seed={seed}", f"train.max_steps={n_sft}", f"checkpoint.every={n_sft}", "checkpoint.keep=1"],
        threads,
    )
    then = train(
        "tiny",
        tmp / f"sftgrpo-s{seed}-n{n_sft}",
        [
            f"seed={seed}",
            f"model.from_run={sft_id}",
            f"train.max_steps={budget - n_sft}",
            "checkpoint.every=0",
        ],
        threads,
    )
    return sft, then


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--sft-steps", default="50,100", help="SFT steps N of the budget (comma list)")
    p.add_argument("--budget", type=int, default=200, help="optimizer steps per arm")
    p.add_argument("--threads", default="1", help="OMP_NUM_THREADS; 'default' unsets it")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    ns = [int(n) for n in args.sft_steps.split(",")]
    if any(not 0 < n < args.budget for n in ns):
        raise SystemExit("bench_sft_grpo: every --sft-steps value must be between 0 and --budget")
    print(
        f"cpu: {os.cpu_count()} cores, OMP_NUM_THREADS={args.threads}; budget {args.budget} optimizer steps; "
        "greedy accuracy on the 41 distinct training sums at the end"
    )
    row = "{:>4} {:>5} {:>10} {:>9} {:>10} {:>8} {:>6} {:>9} {:>10}"
    print(
        row.format(
            "seed", "N", "GRPO alone", "SFT at N", "SFT->GRPO", "margin", "ratio", "GRPO s", "SFT+GRPO s"
        )
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sft-grpo-") as tmp:
        for seed in seeds:
            alone = train(
                "tiny",
                Path(tmp) / f"grpo-s{seed}",
                [f"seed={seed}", f"train.max_steps={args.budget}", "checkpoint.every=0"],
                args.threads,
            )
            for n in ns:
                started = time.perf_counter()
                sft, then = sft_then_grpo(seed, n, args.budget, args.threads, Path(tmp))
                rows.append({"seed": seed, "n_sft": n, "alone": alone, "sft": sft, "then": then})
                print(
                    row.format(
                        seed,
                        n,
                        f"{alone['end']:.3f}",
                        f"{sft['end']:.3f}",
                        f"{then['end']:.3f}",
                        f"{then['end'] - alone['end']:+.3f}",
                        f"{then['end'] / alone['end']:.2f}" if alone["end"] else "inf",
                        f"{alone['train_s']:.1f}",
                        f"{sft['train_s'] + then['train_s']:.1f}",
                    ),
                    f"  ({time.perf_counter() - started:.0f} s wall for SFT->GRPO)",
                    flush=True,
                )
    for n in ns:
        mine = [r for r in rows if r["n_sft"] == n]
        alone = statistics.mean(r["alone"]["end"] for r in mine)
        then = statistics.mean(r["then"]["end"] for r in mine)
        sft = statistics.mean(r["sft"]["end"] for r in mine)
        worst = min(r["then"]["end"] - r["alone"]["end"] for r in mine)
        wins = sum(r["then"]["end"] > r["alone"]["end"] for r in mine)
        print(
            f"N={n}: mean GRPO alone {alone:.3f}, SFT at N {sft:.3f}, SFT->GRPO {then:.3f} "
            f"(margin {then - alone:+.3f}, ratio {then / alone:.2f}x); smallest margin {worst:+.3f}; "
            f"SFT->GRPO ahead on {wins}/{len(mine)} seeds; constant answer {mine[0]['alone']['baseline']:.3f}"
        )


if __name__ == "__main__":
    main()
