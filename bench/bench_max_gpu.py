"""The max_gpu recipe's step on one GPU: phase split, tokens/s, corrected MFU with HFU, peak memory.

The model is Qwen2-0.5B's architecture with random weights built on the GPU (training_core.models.shapes),
so nothing comes from the hub; prompts are synthetic strings of ``--prompt-tokens`` tokens (the character
tokenizer makes one token per character), rewards are random in [-1, 1] so advantages are non-zero.
Everything else is recipes/max_gpu.toml as resolved on this machine (platform preset, precision, 512
completions per step, the auto engine, the micro-batch and checkpointing settled from the memory estimate
as a run settles them), through the same grpo_args and trainer class as a real run. ``--set`` changes
any of it (bench/gpu_perf/part_s.py runs the earlier settings and plain TRL's beside it).

How the numbers are computed (steps after ``--warmup`` only):
- a step = one optimizer step; rollout phase = TRL's generate-and-score (generation, rewards,
  advantages); train phase = the rest of the step (forward + backward over the batch, optimizer step).
- generation tokens/s = completion tokens generated (completion_mask, padding excluded) / generation time.
- train tokens/s = tokens the loss trains on (prompt + completion tokens, padding excluded) / train time.
- MFU = the corrected model FLOPs of the train phase (training_core.run.flops: 6 x the weights outside
  embedding and head on every trained token, 6 x the head on the scored completion tokens) / train-phase
  seconds / the card's peak dense bf16 FLOP/s (training_core.run.metrics.PEAK_FLOPS, H100 SXM 989e12);
  ``mfu_step`` the same over the whole step, ``hfu`` what the GPU ran (generation, recompute, the
  old-logprob forward) over the whole step; ``mfu_6n`` the old 6 x all weights figure, for comparison.
- peak memory % = torch.cuda.max_memory_reserved() / the card's total memory (what the caching
  allocator held at its peak; vLLM's own pool, when used, is in nvidia-smi but not here).

    python bench/bench_max_gpu.py [--steps 8] [--warmup 2] [--prompt-tokens 200] [--set key=value ...]

Without a CUDA GPU it exits with one line saying so (status 2).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="optimizer steps to run (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the averages (default 2)")
    p.add_argument("--prompt-tokens", type=int, default=200, help="tokens per synthetic prompt (default 200)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a max_gpu setting, e.g. train.per_device_train_batch_size=96",
    )
    return p


def no_cuda_reason() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"bench_max_gpu: no CUDA GPU here (torch {torch.__version__}, {build}); run it on a GPU host"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    reason = no_cuda_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    result = run(args.steps, args.warmup, args.prompt_tokens, args.sets)
    print(json.dumps(result))
    print(
        f"max_gpu on {result['gpu']}: peak memory {result['peak_mem_pct']:.1f}% "
        f"({result['peak_mem_gb']:.1f} GB), train {result['train_tokens_per_s']:.0f} tok/s, "
        f"generation {result['gen_tokens_per_s']:.0f} tok/s ({result['engine']}, "
        f"{100 * result['gen_share']:.0f}% of the step), train-phase MFU {100 * result['mfu']:.1f}% "
        f"(HFU {100 * result['hfu']:.1f}%, 6N {100 * result['mfu_6n']:.1f}%)"
    )
    return 0


def run(
    steps: int,
    warmup: int,
    prompt_tokens: int,
    sets: list[str],
    spec: dict[str, Any] | None = None,
    recipe: str = "max_gpu",
) -> dict[str, Any]:
    """Train ``steps`` steps of ``recipe`` (with ``sets``) on a random model of shape ``spec`` (default
    Qwen2-0.5B), built on the GPU; an ``auto`` step is settled for this GPU as a run settles it."""
    import datasets
    import torch
    from transformers import PrinterCallback, TrainerCallback

    from training_core.generation.engines import for_host
    from training_core.hardware.platform import detect, torch_facts, train_precision
    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args
    from training_core.models.shapes import QWEN2_0_5B, build_model, build_tokenizer
    from training_core.recipes import resolve
    from training_core.run import flops, step_plan
    from training_core.run.metrics import peak_flops

    cuda = torch.cuda.is_available()  # False only when a test or a dry mode checks the logic on a CPU
    facts = detect(offline_probe=False)
    fixed = [
        f"train.max_steps={steps}",
        "checkpoint.every=0",
        "eval.task=none",
        "data.prompt_style=plain",
        f"data.max_prompt_length={prompt_tokens}",
    ]
    res = resolve(recipe, [*fixed, *sets], facts)
    precision, note = train_precision(res.config.model.precision, facts, torch_facts())
    if note:
        print(note, file=sys.stderr)
    spec = spec or QWEN2_0_5B
    gpu_gb = torch.cuda.get_device_properties(0).total_memory / 1e9 if cuda else 0.0
    res = step_plan.settle(res.with_model(precision=precision), gpu_gb, lambda: spec)
    cfg = res.config
    model = build_model(
        spec, torch.bfloat16 if precision == "bf16" else torch.float32, device="cuda" if cuda else "cpu"
    )
    tokenizer = build_tokenizer(spec["vocab_size"])
    setup = flops.setup_for(cfg, model)
    n_params = sum(p.numel() for p in model.parameters())
    rng = random.Random(cfg.seed)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789 +-=?"
    prompts = ["".join(rng.choice(letters) for _ in range(prompt_tokens)) for _ in range(1024)]
    ds = datasets.Dataset.from_list([{"prompt": p} for p in prompts])

    def random_reward(completions: list[Any], **_: Any) -> list[float]:
        return [rng.uniform(-1.0, 1.0) for _ in completions]

    # One random stand-in per recipe reward (grpo_args passes the recipe's reward weights).
    rewards = [random_reward] * len(cfg.rewards)

    stats: list[dict[str, float]] = []
    zero = {
        "gen_s": 0.0,
        "rollout_s": 0.0,
        "gen_tokens": 0.0,
        "gen_prompt_tokens": 0.0,
        "train_tokens": 0.0,
        "scored": 0.0,
    }

    def sync() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    class Timed(PippaGRPOTrainer):
        """Bench-only timing hooks. ``_generate`` / ``_generate_and_score_completions`` are TRL
        internals (no public hook splits the rollout from the update); fine for a benchmark, never in
        the product code."""

        cur: dict[str, float]

        def _generate(self, *a: Any, **kw: Any) -> Any:
            t = sync()
            out = super()._generate(*a, **kw)
            self.cur["gen_s"] += sync() - t
            return out

        def _generate_and_score_completions(self, *a: Any, **kw: Any) -> Any:
            t = sync()
            out = super()._generate_and_score_completions(*a, **kw)
            self.cur["rollout_s"] += sync() - t
            self.cur["gen_tokens"] += float(out["completion_mask"].sum().item())
            self.cur["gen_prompt_tokens"] += float(out["prompt_mask"].sum().item())
            return out

        def compute_loss(self, model: Any, inputs: dict[str, Any], *a: Any, **kw: Any) -> Any:
            n = inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()
            self.cur["train_tokens"] += float(n.item())
            self.cur["scored"] += float(inputs["completion_mask"].sum().item())
            return super().compute_loss(model, inputs, *a, **kw)

    class StepClock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            trainer.cur = {**zero, "t0": sync()}

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            c = trainer.cur
            step_s = sync() - c["t0"]
            stats.append({**c, "step_s": step_s, "train_s": step_s - c["rollout_s"]})

    with tempfile.TemporaryDirectory(prefix="bench-max-gpu-") as tmp:
        plan = for_host(cfg)
        trainer = Timed(
            model=model,
            processing_class=tokenizer,
            reward_funcs=rewards,
            args=grpo_args(cfg, Path(tmp), ["none"], "bench_max_gpu"),
            train_dataset=ds,
            callbacks=[StepClock()],
            generation=plan,
        )
        trainer.remove_callback(PrinterCallback)  # TRL's raw dict per step; the result is one line
        trainer.cur = {**zero, "t0": sync()}
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()

    kept = stats[warmup:] or stats
    total = torch.cuda.get_device_properties(0).total_memory if cuda else 1
    peak = torch.cuda.max_memory_reserved() if cuda else 0
    sums = {k: sum(s[k] for s in kept) for k in (*zero, "step_s", "train_s")}
    train_tps = sums["train_tokens"] / sums["train_s"]
    gen_tps = sums["gen_tokens"] / max(1e-9, sums["gen_s"])
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    card = peak_flops(gpu)
    counts = flops.StepCounts(
        seconds=sums["step_s"],
        gen_seconds=sums["rollout_s"],
        tokens=sums["train_tokens"],
        scored=sums["scored"],
        gen_prompt_tokens=sums["gen_prompt_tokens"],
        gen_tokens=sums["gen_tokens"],
    )
    fig = flops.figures(counts, setup, card)
    t = cfg.train
    return {
        "gpu": gpu,
        "precision": precision,
        "params": n_params,
        "batch": t.per_device_train_batch_size,
        "accumulation": t.gradient_accumulation_steps,
        "generation_batch": t.generation_batch,
        "num_generations": t.num_generations,
        "max_completion_length": t.max_completion_length,
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "use_vllm": bool(t.use_vllm),
        "engine": trainer.engine,  # after any fallback
        "on_policy": not setup.old_logprob_forward,
        "steps_measured": len(kept),
        "step_s": statistics.median(s["step_s"] for s in kept),
        "rollout_s": sums["rollout_s"] / len(kept),
        "gen_s": sums["gen_s"] / len(kept),
        "train_s": sums["train_s"] / len(kept),
        "gen_share": sums["gen_s"] / sums["step_s"],
        "step_tokens_per_s": sums["train_tokens"] / sums["step_s"],
        "peak_mem_gb": peak / 1e9,
        "peak_mem_pct": 100 * peak / total,
        "train_tokens_per_s": train_tps,
        "gen_tokens_per_s": gen_tps,
        # the corrected MFU of the train phase (training_core.run.flops), the whole step's, and HFU
        "mfu": fig.get("perf/mfu", float("nan")),
        "mfu_step": fig.get("perf/mfu_step", float("nan")),
        "hfu": fig.get("perf/hfu", float("nan")),
        # the figure this bench printed before: 6 x all parameters x train tokens/s
        "mfu_6n": 6 * n_params * train_tps / card if card else float("nan"),
    }


if __name__ == "__main__":
    sys.exit(main())
