"""The max_gpu recipe's shape on one GPU: peak memory, train and generation tokens/s, train-phase MFU.

The model is Qwen2-0.5B's architecture with random weights built in memory (training_core.models.shapes), so
nothing comes from the hub; prompts are synthetic strings of ``--prompt-tokens`` tokens (the character
tokenizer makes one token per character), rewards are random in [-1, 1] so advantages are non-zero.
Everything else is recipes/max_gpu.toml as resolved on this machine (platform preset, precision,
batch 64, 8 generations, 256 completion tokens, gradient checkpointing on A100/H100), through the same
grpo_args and trainer class as a real run. Goal on one H100: peak memory >= 75%, train-phase MFU >= 30%.

How the numbers are computed (steps after ``--warmup`` only):
- a step = one optimizer step; rollout phase = TRL's generate-and-score (generation, rewards,
  advantages); train phase = the rest of the step (forward + backward over the batch, optimizer step).
- generation tokens/s = completion tokens generated (completion_mask, padding excluded) / generation time.
- train tokens/s = tokens the loss trains on (prompt + completion tokens, padding excluded) / train time.
- MFU = 6 * N * train tokens/s / the card's peak dense bf16 FLOP/s (training_core.run.metrics.PEAK_FLOPS,
  H100 SXM 989e12). N = parameters (494M, tied embeddings counted once). 6N is the model's FLOPs per
  token (forward 2N + backward 4N); attention FLOPs and the recompute of gradient checkpointing are not
  counted, so this is the usual conservative "model FLOPs" utilisation.
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
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a max_gpu setting, e.g. train.per_device_train_batch_size=96")  # fmt: skip
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
        f"generation {result['gen_tokens_per_s']:.0f} tok/s, train-phase MFU {100 * result['mfu']:.1f}% "
        f"(goals: memory >= 75%, MFU >= 30%)"
    )
    return 0


def run(
    steps: int, warmup: int, prompt_tokens: int, sets: list[str], spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train ``steps`` steps of max_gpu on a random model of shape ``spec`` (default Qwen2-0.5B)."""
    import datasets
    import torch
    from transformers import PrinterCallback, TrainerCallback

    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args
    from training_core.models.shapes import QWEN2_0_5B, build_model, build_tokenizer
    from training_core.platform import detect, torch_facts, train_precision
    from training_core.recipes import resolve
    from training_core.run.metrics import peak_flops

    facts = detect(offline_probe=False)
    fixed = [f"train.max_steps={steps}", "checkpoint.every=0", "eval.task=none", "data.prompt_style=plain"]
    res = resolve("max_gpu", [*fixed, *sets], facts)
    cfg = res.config
    precision, note = train_precision(cfg.model.precision, facts, torch_facts())
    if note:
        print(note, file=sys.stderr)
    cfg = res.with_model(precision=precision).config
    spec = spec or QWEN2_0_5B
    model = build_model(spec, torch.bfloat16 if precision == "bf16" else torch.float32)
    tokenizer = build_tokenizer(spec["vocab_size"])
    n_params = sum(p.numel() for p in model.parameters())
    rng = random.Random(cfg.seed)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789 +-=?"
    prompts = ["".join(rng.choice(letters) for _ in range(prompt_tokens)) for _ in range(512)]
    ds = datasets.Dataset.from_list([{"prompt": p} for p in prompts])

    def random_reward(completions: list[Any], **_: Any) -> list[float]:
        return [rng.uniform(-1.0, 1.0) for _ in completions]

    # One random stand-in per recipe reward (grpo_args passes the recipe's reward weights).
    rewards = [random_reward] * len(cfg.rewards)

    stats: list[dict[str, float]] = []
    zero = {"gen_s": 0.0, "rollout_s": 0.0, "gen_tokens": 0.0, "train_tokens": 0.0}
    cuda = torch.cuda.is_available()  # False only when a test checks the script's logic on a CPU

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
            return out

        def compute_loss(self, model: Any, inputs: dict[str, Any], *a: Any, **kw: Any) -> Any:
            n = inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()
            self.cur["train_tokens"] += float(n.item())
            return super().compute_loss(model, inputs, *a, **kw)

    class StepClock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            trainer.cur = {**zero, "t0": sync()}

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            c = trainer.cur
            step_s = sync() - c["t0"]
            stats.append({**c, "step_s": step_s, "train_s": step_s - c["rollout_s"]})

    with tempfile.TemporaryDirectory(prefix="bench-max-gpu-") as tmp:
        trainer = Timed(
            model=model,
            processing_class=tokenizer,
            reward_funcs=rewards,
            args=grpo_args(cfg, Path(tmp), ["none"], "bench_max_gpu"),
            train_dataset=ds,
            callbacks=[StepClock()],
        )
        trainer.remove_callback(PrinterCallback)  # TRL's raw dict per step; the result is one line
        trainer.cur = {**zero, "t0": sync()}
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()

    kept = stats[warmup:] or stats
    total = torch.cuda.get_device_properties(0).total_memory if cuda else 1
    peak = torch.cuda.max_memory_reserved() if cuda else 0
    train_tps = sum(s["train_tokens"] for s in kept) / sum(s["train_s"] for s in kept)
    gen_tps = sum(s["gen_tokens"] for s in kept) / max(1e-9, sum(s["gen_s"] for s in kept))
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    flops = peak_flops(gpu)
    return {
        "gpu": gpu,
        "precision": precision,
        "params": n_params,
        "batch": cfg.train.per_device_train_batch_size,
        "num_generations": cfg.train.num_generations,
        "max_completion_length": cfg.train.max_completion_length,
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "use_vllm": bool(cfg.train.use_vllm),
        "steps_measured": len(kept),
        "step_s": statistics.median(s["step_s"] for s in kept),
        "peak_mem_gb": peak / 1e9,
        "peak_mem_pct": 100 * peak / total,
        "train_tokens_per_s": train_tps,
        "gen_tokens_per_s": gen_tps,
        "mfu": 6 * n_params * train_tps / flops if flops else float("nan"),
    }


if __name__ == "__main__":
    sys.exit(main())
