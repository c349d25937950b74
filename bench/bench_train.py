"""Step time of the tiny recipe through training_core vs a bare TRL script with identical settings.

Both run in this one process, alternating (ours, bare, ours, bare, ...) so machine load hits both
alike; each reports the median interval between consecutive logged steps. training_core adds the
metrics.jsonl writer, the progress line and the atomic-checkpoint subclass; the goal is <= 1.05x.
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
    from training_core.platform import PlatformFacts
    from training_core.recipes import resolve

    sets = [f"train.max_steps={steps}", "eval.task=none", "checkpoint.every=0"]
    return resolve("tiny", sets, PlatformFacts())


def ours(steps: int, tmp: Path, i: int) -> list[float]:
    from training_core.runner import run

    run_dir = tmp / f"ours-{i}"
    with contextlib.redirect_stdout(io.StringIO()):
        assert run(_recipe(steps), run_dir) == 0
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = [r["time"] for r in recs if r["type"] == "step"]
    return [b - a for a, b in itertools.pairwise(times)]


def bare(steps: int, tmp: Path, i: int) -> list[float]:
    """What a user would write with TRL alone: same model, data, rewards and GRPO settings (taken
    from the recipe, so the two sides cannot drift apart), no metrics file, eval or checkpoints."""
    import functools

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
    from trl import GRPOConfig, GRPOTrainer

    from training_core import tiny
    from training_core.data import synthetic_problems
    from training_core.rewards.registry import load_all

    cfg = _recipe(steps).config
    t = cfg.train
    set_seed(cfg.seed)
    path = tiny.ensure()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    params = dict(cfg.data.params)
    rows = synthetic_problems(params.pop("n"), cfg.seed, **params)
    reward_funcs: list[Any] = []
    for r in cfg.rewards:
        fn = functools.partial(load_all()[r.name], **r.params)
        fn.__name__ = r.name  # type: ignore[attr-defined]  # TRL names its reward metrics after it
        reward_funcs.append(fn)

    stamps: list[float] = []

    class Stamp(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "train_runtime" not in logs:
                stamps.append(time.time())

    args = GRPOConfig(
        output_dir=str(tmp / f"bare-{i}"),
        seed=cfg.seed,
        loss_type="dr_grpo",
        scale_rewards="none",
        beta=0.0,
        max_steps=steps,
        learning_rate=t.learning_rate,
        warmup_steps=t.warmup_ratio,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        logging_steps=1,
        save_strategy="no",
        report_to=["none"],
        disable_tqdm=True,
        dataloader_num_workers=0,
        reward_weights=[r.weight for r in cfg.rewards],
        log_completions=False,
        bf16=False,
    )
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
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    ours_dt: list[float] = []
    bare_dt: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            ours_dt += ours(a.steps, Path(d), i)
            bare_dt += bare(a.steps, Path(d), i)
    o, b = statistics.median(ours_dt), statistics.median(bare_dt)
    print(f"tiny recipe, {a.steps} steps x {a.rounds} rounds, median step interval")
    print(f"  training_core : {o * 1000:8.2f} ms/step")
    print(f"  bare TRL      : {b * 1000:8.2f} ms/step")
    print(f"  ratio         : {o / b:8.3f}x  (goal <= 1.05x)")


if __name__ == "__main__":
    main()
