"""Part S (step): one warm-up and two measured GRPO steps each of A0 (max_gpu as it was: 8 prompts x 8,
one micro-batch of 64, gradient checkpointing on, HF generate), A1 (plain TRL GRPOConfig defaults at B's
batch: 8 completions per micro-step, accumulation to 512, checkpointing on, HF generate) and B (pippa's
tuned step: recipes/max_gpu.toml as it is, 512 completions on-policy, the auto engine, micro-batch and
checkpointing from the memory estimate), side by side on the Qwen2.5-0.5B shape built on the GPU: step
seconds, phase split, tokens/s, corrected MFU with HFU, peak memory, and the B/A0 and B/A1 ratios of the
whole step's tokens/s (prompt + completion). Through bench/bench_max_gpu.py's run(), as a real run."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import _part

sys.path.insert(0, str(_part.ROOT / "bench"))

HF = 'generation.engine="hf"'
ARMS: dict[str, list[str]] = {
    "A0": [
        "train.per_device_train_batch_size=64",
        "train.gradient_accumulation_steps=1",
        "train.generation_batch_size=64",
        "model.gradient_checkpointing=true",
        HF,
    ],
    "A1": [
        "train.per_device_train_batch_size=8",
        "train.gradient_accumulation_steps=64",
        "train.generation_batch_size=512",
        "model.gradient_checkpointing=true",
        HF,
    ],
    "B": [],
}
# the dry mode: the same three arms at a CPU's size (a toy shape, short prompts and completions)
DRY_SETS = {
    "A0": [
        "train.per_device_train_batch_size=8",
        "train.gradient_accumulation_steps=1",
        "train.generation_batch_size=8",
        "model.gradient_checkpointing=true",
        HF,
    ],
    "A1": [
        "train.per_device_train_batch_size=4",
        "train.gradient_accumulation_steps=4",
        "train.generation_batch_size=16",
        "model.gradient_checkpointing=true",
        HF,
    ],
    "B": [
        "train.per_device_train_batch_size=0",
        "train.generation_batch_size=16",
        'model.gradient_checkpointing="auto"',
    ],
}
KEEP = (
    "engine",
    "batch",
    "accumulation",
    "generation_batch",
    "gradient_checkpointing",
    "on_policy",
    "step_s",
    "rollout_s",
    "gen_s",
    "train_s",
    "gen_share",
    "step_tokens_per_s",
    "train_tokens_per_s",
    "gen_tokens_per_s",
    "mfu",
    "mfu_step",
    "hfu",
    "mfu_6n",
    "peak_mem_gb",
    "peak_mem_pct",
)


def arm(name: str, dry: bool, spec: dict[str, Any] | None) -> dict[str, Any]:
    import bench_max_gpu
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sets = DRY_SETS[name] + ["train.max_completion_length=8"] if dry else ARMS[name]
    # the dry mode measures one step after the warm-up (the CPU is only checking the code)
    r = bench_max_gpu.run(
        steps=2 if dry else 3, warmup=1, prompt_tokens=16 if dry else 200, sets=sets, spec=spec
    )
    return {k: None if isinstance(r[k], float) and math.isnan(r[k]) else r[k] for k in KEEP}


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    _part.device(a.dry)
    from training_core.models.shapes import QWEN2_0_5B, QWEN2_TOY

    spec = QWEN2_TOY if a.dry else QWEN2_0_5B
    arms: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for name in ("B", "A0", "A1"):  # B first: a time limit that cuts the part keeps the tuned step
        try:
            arms[name] = arm(name, a.dry, spec)
        except Exception as e:  # one arm failing (memory, compile) still leaves the others' figures
            arms[name] = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"}
        tps = {k: v.get("step_tokens_per_s") for k, v in arms.items()}
        ratios = {f"B/{k}": tps["B"] / tps[k] for k in ("A0", "A1") if tps.get("B") and tps.get(k)}
        _part.write(a.out, "S", a.dry, t0, shape="toy" if a.dry else "Qwen2.5-0.5B", arms=arms, ratios=ratios)
    fits = largest_fit(spec, a.dry)
    _part.write(
        a.out,
        "S",
        a.dry,
        t0,
        shape="toy" if a.dry else "Qwen2.5-0.5B",
        arms=arms,
        ratios=ratios,
        largest_fit=fits,
    )
    failed = [f"{k}: {v['error']}" for k, v in arms.items() if "error" in v]
    if failed:
        raise SystemExit("step arms failed: " + "; ".join(failed))
    print(headline(arms, ratios))


def largest_fit(spec: dict[str, Any], dry: bool) -> dict[str, Any] | None:
    """The largest generation batch (prompts x 8, 200 + 256 tokens) that the step's memory estimate puts
    at <= 90% of this card (training_core.run.step_plan.largest_batch): an estimate, beside arm B's
    measured peak; in the dry mode (CPU) an 80 GB card stands in."""
    import torch

    from training_core.run import step_plan

    gpu_gb = 80.0 if dry else torch.cuda.get_device_properties(0).total_memory / 1e9
    found = step_plan.largest_batch(step_plan.dims_of(spec), gpu_gb, False, 200, 256)
    if found is None:
        return None
    batch, step = found
    return {
        "batch": batch,
        "per_device": step.per_device,
        "checkpointing": step.checkpointing,
        "estimate_gb": round(step.estimate_gb, 1),
        "card_gb": round(gpu_gb, 1),
    }


def headline(arms: dict[str, Any], ratios: dict[str, float]) -> str:
    b = arms["B"]
    speeds = ", ".join(f"{k} {v['step_tokens_per_s']:,.0f} tok/s" for k, v in arms.items())
    mfu = f"train MFU {100 * b['mfu']:.1f}%, HFU {100 * b['hfu']:.1f}%" if b["mfu"] is not None else "no MFU"
    times = ", ".join(f"{k} {r:.2f}x" for k, r in ratios.items())
    return f"step: {speeds}; {times}; B: engine {b['engine']}, {mfu}"


if __name__ == "__main__":
    main()
