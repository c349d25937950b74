"""Step time of the tiny recipe through training_core vs a bare TRL script with identical settings.

Both run in this one process, alternating (ours, bare, ours, bare, ...) so machine load hits both
alike; each reports the median interval between consecutive logged steps. training_core adds the
metrics.jsonl writer, the progress line and the checkpoint-publishing callback; the goal is <= 1.05x.
Interval eval and checkpoints are off in both (the bare script has neither).

    .venv/bin/python bench/bench_train.py [--steps 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _recipe(steps: int) -> Any:
    """The tiny recipe as resolved on this machine: both sides read every setting from it."""
    from training_core.hardware.platform import PlatformFacts
    from training_core.recipes import resolve

    sets = [f"train.max_steps={steps}", "eval.task=none", "checkpoint.every=0"]
    return resolve("tiny", sets, PlatformFacts())


def ours(steps: int, tmp: Path, i: int) -> list[float]:
    from training_core.methods.grpo import GrpoMethod

    run_dir = tmp / f"ours-{i}"
    with contextlib.redirect_stdout(io.StringIO()):
        assert GrpoMethod().run(_recipe(steps), run_dir) == 0
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = [r["time"] for r in recs if r["type"] == "step"]
    return [b - a for a, b in itertools.pairwise(times)]


def bare(steps: int, tmp: Path, i: int) -> list[float]:
    """What a user would write with TRL alone: same model, data, rewards and GRPO settings (taken
    from the recipe, so the two sides cannot drift apart), no metrics file, eval or checkpoints."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
    from trl import GRPOTrainer

    from training_core.data.loaders import synthetic_problems
    from training_core.methods.trainer import grpo_args
    from training_core.models import tiny
    from training_core.rewards.registry import build

    cfg = _recipe(steps).config
    set_seed(cfg.seed)
    path = tiny.ensure()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    params = dict(cfg.data.params)
    rows = synthetic_problems(params.pop("n"), cfg.seed, **params)
    reward_funcs: list[Any] = []
    for r in cfg.rewards:
        reward_funcs.append(build(r.name, r.params))

    stamps: list[float] = []

    class Stamp(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "train_runtime" not in logs:
                stamps.append(time.time())

    # The very GRPOConfig training_core builds (Dr GRPO, lengths, lr, precision, gradient checkpointing
    # off on CPU, logging every step, no saving): only the wrapper around TRL differs between the sides.
    args = grpo_args(cfg, tmp / f"bare-{i}", ["none"], "bare")
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        callbacks=[Stamp()],
    )
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    return [b - a for a, b in itertools.pairwise(stamps)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=6)
    a = p.parse_args()
    ours_dt: list[float] = []
    bare_dt: list[float] = []
    round_ratios: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            # ABBA order: neither side always runs first (warm caches, allocator state, CPU clocks).
            first, second = (ours, bare) if i % 2 == 0 else (bare, ours)
            r1, r2 = first(a.steps, Path(d), i), second(a.steps, Path(d), i)
            o_i, b_i = (r1, r2) if first is ours else (r2, r1)
            ours_dt += o_i
            bare_dt += b_i
            round_ratios.append(statistics.median(o_i) / statistics.median(b_i))
    o, b = statistics.median(ours_dt), statistics.median(bare_dt)
    print(f"tiny recipe, {a.steps} steps x {a.rounds} rounds (ABBA), median step interval")
    print(f"  training_core : {o * 1000:8.2f} ms/step")
    print(f"  bare TRL      : {b * 1000:8.2f} ms/step")
    print(f"  per-round ratios: {', '.join(f'{r:.3f}' for r in round_ratios)}")
    print(f"  ratio         : {o / b:8.3f}x  (goal <= 1.05x)")


if __name__ == "__main__":
    main()
