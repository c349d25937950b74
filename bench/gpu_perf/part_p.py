"""Part P (precision): do small updates land? The Qwen2.5-0.5B shape (random init, built on the device from
its config in code: Qwen2.5-0.5B's config.json has the architecture fields of training_core.models.shapes
.QWEN2_0_5B), 3 GRPO steps through the real trainer (grpo_args -> PippaGRPOTrainer -> HF Trainer) at lr
5e-6 and 1e-6, in pure bf16 (``bf16_pure``) and in the default precision (``bf16`` as settled for this
GPU by training_core.hardware.precision.choose), each against an fp32 reference from the same init and batch:
fraction of parameter elements changed (RMSNorm weights apart), update norm / the reference's, step time
(median of steps 2-3), peak memory. ``--dry``: the tiny shape on the CPU with an H100's facts faked,
lr 1e-6 only."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _part

LRS = (5e-6, 1e-6)


def _reward(completions: list[str], **_: object) -> list[float]:
    """Deterministic, with spread between random completions: the advantages are non-zero."""
    return [sum(ch.isdigit() for ch in c) + 0.1 * len(c) for c in completions]


def _spec(dry: bool) -> dict[str, Any]:
    from training_core.models import shapes, tiny

    if dry:
        return {**{k: v for k, v in tiny.SPEC.items() if k != "seed"}, "vocab_size": 128}
    return dict(shapes.QWEN2_0_5B)


def _facts(dry: bool) -> Any:
    from training_core.hardware.platform import PlatformFacts, detect

    if dry:  # an H100's facts, so the dry run settles what an H100 would
        return PlatformFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80.0, bf16=True)
    return detect(offline_probe=False)


def _run(mode: str, lr: float, spec: dict[str, Any], facts: Any, dev: str, dry: bool) -> dict[str, Any]:
    """3 GRPO steps in ``mode`` at ``lr``: the parameters before and after (fp32), step times, peak memory."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from training_core.hardware.precision import BF16_WEIGHTS
    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args
    from training_core.models.shapes import build_model, build_tokenizer
    from training_core.recipes import resolve

    sets = [
        "train.max_steps=3",
        f"train.learning_rate={lr}",
        "train.warmup_ratio=0",
        "train.lr_scheduler_type=constant",
        "train.per_device_train_batch_size=16",
        "train.gradient_accumulation_steps=1",
        "train.num_generations=4",
        f"train.max_completion_length={4 if dry else 32}",
        "train.use_vllm=false",
        "checkpoint.every=0",
        "eval.task=none",
        "logging.progress=false",
        f"model.precision={mode}",
    ]
    cfg = resolve("tiny", sets, facts).config
    with torch.device(dev):  # the weights are initialised on the device itself
        model = build_model(spec, torch.bfloat16 if mode in BF16_WEIGHTS else torch.float32, seed=0)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    times: list[float] = []

    class StepTimes(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if dev == "cuda":
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            if dev == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t0)

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = PippaGRPOTrainer(
            model=model,
            processing_class=build_tokenizer(spec["vocab_size"]),
            reward_funcs=[_reward],
            args=grpo_args(cfg, Path(tmp), ["none"], "p"),
            train_dataset=Dataset.from_list([{"prompt": f"{i % 97}+{i % 89}="} for i in range(64)]),
            callbacks=[StepTimes()],
            precision=mode,
        )
        trainer.train()
    after = {}
    for n, p in model.named_parameters():  # bf16_kahan: the weight plus the compensation it carries
        comp = trainer.optimizer.state.get(p, {}).get("kahan_comp")
        after[n] = p.detach().float() + (comp.float() if comp is not None and comp.numel() > 1 else 0.0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else 0.0
    step_s = statistics.median(times[1:]) if len(times) > 1 else (times[0] if times else 0.0)
    del trainer, model
    if dev == "cuda":
        torch.cuda.empty_cache()
    return {"before": before, "after": after, "step_s": step_s, "peak_gb": peak}


def _compare(run: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    import torch

    b, a, rb, ra = run["before"], run["after"], ref["before"], ref["after"]

    def changed(only: str = "") -> float:
        names = [n for n in b if only in n]
        return sum(int((a[n] != b[n]).sum()) for n in names) / sum(b[n].numel() for n in names)

    def norm(x: dict[str, Any], y: dict[str, Any]) -> float:
        return float(torch.sqrt(sum(((x[n] - y[n]) ** 2).sum() for n in y)))

    return {
        "changed": round(changed(), 4),
        "changed_norm_weights": round(changed("norm"), 4),
        "update_norm_ratio": round(norm(a, b) / max(norm(ra, rb), 1e-30), 4),
        "step_s": round(run["step_s"], 3),
        "peak_gb": round(run["peak_gb"], 2),
    }


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    dev = _part.device(a.dry)
    import torch

    from training_core.hardware.precision import choose
    from training_core.models.shapes import build_model

    spec, facts = _spec(a.dry), _facts(a.dry)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in build_model(spec).parameters())
    default = choose(n_params, n_params, facts.gpu_memory_gb)
    results: dict[str, dict[str, Any]] = {}
    for lr in LRS[1:] if a.dry else LRS:  # the dry run: the smaller rate only
        ref = _run("fp32", lr, spec, facts, dev, a.dry)
        for mode in ("bf16_pure", default.mode):
            results[f"{mode}@{lr:g}"] = _compare(_run(mode, lr, spec, facts, dev, a.dry), ref)
        results[f"fp32@{lr:g}"] = _compare(ref, ref)
        del ref
        # written after each rate, so a timeout of the second loses only the second
        figures = {"device": dev, "n_params": n_params, "default": default.as_dict(), "runs": results}
        _part.write(a.out, "P", a.dry, t0, **figures)
    d, p = results[f"{default.mode}@1e-06"], results["bf16_pure@1e-06"]
    print(
        f"lr 1e-6, 3 steps: {default.mode} changed {d['changed']:.1%} (update norm / fp32 "
        f"{d['update_norm_ratio']:.3f}, {d['step_s']:.2f} s/step), bf16_pure changed {p['changed']:.1%} "
        f"({p['step_s']:.2f} s/step)"
    )


if __name__ == "__main__":
    main()
