"""The tictactoe_tiny learning claim over seeds: what docs/training.md quotes.

Runs ``python -m training_core.train tictactoe_tiny`` once per seed, one run at a time, and prints per
run: training time, the self-play invalid-move rate per move (mean of the first and last 10 steps),
and the interval eval against the random-move opponent (win, invalid) and the minimax opponent
(draw, invalid) at step 0 and at the end. The bar a policy must clear to show more than legal moves:
a uniformly random legal-move policy against the same random opponent, computed exactly over the game
tree here (half the games in each role, as the eval plays them). The last lines give the smallest
change over seeds.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_selfplay.py [--seeds 0,1,2] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from training_core.selfplay.tictactoe import MARKS, legal_moves, winner  # noqa: E402


@cache
def _random_vs_random(board: tuple[str, ...], player: int, me: int) -> tuple[float, float]:
    """(P(win), P(draw)) for ``me`` when both sides play uniformly random legal moves."""
    moves = legal_moves(board)
    win = draw = 0.0
    for m in moves:
        nxt = (*board[:m], MARKS[player], *board[m + 1 :])
        w = winner(nxt)
        if w is not None:
            win += (w == me) / len(moves)
        elif not legal_moves(nxt):
            draw += 1 / len(moves)
        else:
            a, b = _random_vs_random(nxt, 1 - player, me)
            win, draw = win + a / len(moves), draw + b / len(moves)
    return win, draw


def random_policy_bar() -> dict[str, float]:
    (w0, d0), (w1, d1) = _random_vs_random(("",) * 9, 0, 0), _random_vs_random(("",) * 9, 0, 1)
    return {"p0_win": w0, "p1_win": w1, "win": (w0 + w1) / 2, "draw": (d0 + d1) / 2}


def one_run(seed: int, sets: list[str], tmp: Path) -> dict[str, Any]:
    run_dir = tmp / f"seed{seed}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    argv = [sys.executable, "-m", "training_core.train", "tictactoe_tiny", "--run-dir", str(run_dir)]
    for s in [f"seed={seed}", "checkpoint.every=0", "logging.progress=false", *sets]:
        argv += ["--set", s]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench_selfplay: seed {seed} failed:\n{proc.stdout}{proc.stderr}")
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps = [r for r in recs if r["type"] == "step"]
    evals = [r for r in recs if r["type"] == "eval"]

    def per_move(rows: list[dict[str, Any]]) -> float:
        return sum(r["game/invalid_per_move"] for r in rows) / len(rows)

    first, last = evals[0], evals[-1]
    return {
        "seed": seed,
        "wall_s": wall,
        "train_s": recs[-1]["time"] - steps[0]["time"] + steps[0]["perf/step_time_s"],
        "steps": steps[-1]["step"],
        "pm0": per_move(steps[:10]),
        "pm1": per_move(steps[-10:]),
        **{f"{k}0": first[f"eval/vs_random/{k}"] for k in ("win", "invalid")},
        **{f"{k}1": last[f"eval/vs_random/{k}"] for k in ("win", "invalid")},
        "mm_draw1": last["eval/vs_minimax/draw"],
        "mm_inv0": first["eval/vs_minimax/invalid"],
        "mm_inv1": last["eval/vs_minimax/invalid"],
        "games": last["eval/vs_random/games"],
        "best_win": max(e["eval/vs_random/win"] for e in evals),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    bar = random_policy_bar()
    print(
        f"cpu: {os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1 (set here)')}; "
        f"tictactoe_tiny {' '.join(args.sets)}, one run at a time"
    )
    print(
        f"random legal-move policy vs the random opponent (exact): win {bar['win']:.3f} "
        f"(as p0 {bar['p0_win']:.3f}, as p1 {bar['p1_win']:.3f}), draw {bar['draw']:.3f}, invalid 0"
    )
    row = "{:>4} {:>7} {:>13} {:>13} {:>15} {:>8} {:>15}"
    print(row.format("seed", "train s", "inv/move", "rand win", "rand invalid", "best win", "minimax inv"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-selfplay-") as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            r = one_run(seed, args.sets, Path(tmp))
            rows.append(r)
            print(
                row.format(
                    seed,
                    f"{r['train_s']:.0f}",
                    f"{r['pm0']:.2f} -> {r['pm1']:.2f}",
                    f"{r['win0']:.2f} -> {r['win1']:.2f}",
                    f"{r['invalid0']:.2f} -> {r['invalid1']:.2f}",
                    f"{r['best_win']:.2f}",
                    f"{r['mm_inv0']:.2f} -> {r['mm_inv1']:.2f}",
                ),
                flush=True,
            )
    gain = min(r["win1"] - r["win0"] for r in rows)
    drop = min(r["invalid0"] - r["invalid1"] for r in rows)
    print(
        f"{len(rows)} seeds, {rows[0]['steps']} steps, {rows[0]['games']:.0f} eval games per opponent: "
        f"win vs random rose by >= {gain:+.2f}, invalid vs random fell by >= {drop:.2f}; "
        f"end win vs random {min(r['win1'] for r in rows):.2f}..{max(r['win1'] for r in rows):.2f} "
        f"(random legal-move policy: {bar['win']:.3f}); "
        f"slowest training {max(r['train_s'] for r in rows):.0f} s"
    )


if __name__ == "__main__":
    main()
