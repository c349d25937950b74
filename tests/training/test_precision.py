"""The GPU default keeps every small update (docs/training.md, "Precision").

The training runs go through the real path: ``resolve`` -> ``settle`` -> ``load_model`` -> ``grpo_args``
-> ``PippaGRPOTrainer`` (TRL's GRPOTrainer) -> HF Trainer -> the optimizer, for 3 GRPO steps of the tiny
Qwen2 shape (training_core/models/tiny.py, init std 0.02, RMSNorm weights at 1.0).

What is faked: the platform (an H100's PlatformFacts) and the installed torch's facts (a CUDA build with
bf16), so ``settle`` settles the precision it would settle on an H100. The steps then run on the CPU:
HF Trainer gets ``use_cpu=True`` with ``bf16=True``, for which accelerate runs the forward passes under
``torch.autocast("cpu", torch.bfloat16)``, the same autocast a GPU gets; the weights' dtype and the
optimizer are the H100's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from training_core.hardware.platform import PlatformFacts, TorchFacts
from training_core.hardware.precision import choose, pure_bf16_warning
from training_core.models import load_model, settle
from training_core.recipes import resolve

H100 = PlatformFacts(
    gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80.0, bf16=True, compute_capability=9.0
)
CUDA_BF16 = TorchFacts("2.13.0+cu128", "12.8", cuda_available=True, bf16_supported=True)
CPU_TORCH = TorchFacts("2.13.0+cpu", None)
STEPS = [
    "train.max_steps=3",
    "train.warmup_ratio=0",
    "train.lr_scheduler_type=constant",
    "train.per_device_train_batch_size=8",
    "train.num_generations=4",
    "train.max_completion_length=4",
    "checkpoint.every=0",
    "eval.task=none",
]


def _spread(completions: list[str], **_: object) -> list[float]:
    """A deterministic reward with spread between the tiny model's random completions."""
    return [sum(ch.isdigit() for ch in c) + 0.1 * len(c) for c in completions]


def _settled(sets: list[str], facts: PlatformFacts, tf: TorchFacts, tmp: Path) -> Any:
    return settle(resolve("tiny", [*STEPS, *sets], facts), facts, tmp, tf).config


def _train(
    cfg: Any, tmp: Path, hook: Any = None, resume_from: Path | None = None
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """3 GRPO steps; the fp32 values of every parameter before and after (bf16_kahan: the effective
    weight, bf16 weight plus the Kahan compensation the optimizer carries), and the trainer."""
    from datasets import Dataset

    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args

    model, tok = load_model(cfg.model.name, cfg.model.precision)
    if hook is not None:
        hook(model)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    trainer = PippaGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[_spread],  # type: ignore[list-item]
        args=grpo_args(cfg, tmp, ["none"], "t"),  # output_dir: tmp/checkpoints/.staging
        train_dataset=Dataset.from_list([{"prompt": f"{i % 10}+{i % 7}="} for i in range(64)]),
        precision=cfg.model.precision,
    )
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    after = {}
    for n, p in model.named_parameters():
        comp = trainer.optimizer.state.get(p, {}).get("kahan_comp")
        after[n] = p.detach().float() + (comp.float() if comp is not None and comp.numel() > 1 else 0.0)
    return before, after, trainer


def _changed(before: dict[str, Any], after: dict[str, Any], only: str = "") -> float:
    names = [n for n in before if only in n]
    return sum(int((after[n] != before[n]).sum()) for n in names) / sum(before[n].numel() for n in names)


def _update_norm(before: dict[str, Any], after: dict[str, Any]) -> float:
    return float(torch.sqrt(sum(((after[n] - before[n]) ** 2).sum() for n in before)))


# --------------------------------------------------------------------------------- the settled mode


def test_bf16_settles_to_fp32_master_weights_when_they_fit_and_kahan_adamw_when_not(tmp_path: Path) -> None:
    cfg = _settled([], H100, CUDA_BF16, tmp_path)  # auto -> bf16 -> bf16_amp (the tiny model fits)
    assert cfg.model.precision == "bf16_amp"
    res = settle(resolve("tiny", STEPS, H100), H100, tmp_path, CUDA_BF16)
    assert res.platform["precision"]["mode"] == "bf16_amp"  # in the metrics header's config
    # Qwen2-0.5B: 7.9 GB of fp32 master state fits an 80 GB GPU; a 7B full fine-tune (112 GB) does not.
    assert choose(494_000_000, 494_000_000, 80.0).mode == "bf16_amp"
    seven_b = choose(7_600_000_000, 7_600_000_000, 80.0)
    assert seven_b.mode == "bf16_kahan" and "zero" in seven_b.why
    assert choose(7_600_000_000, 7_600_000_000, 80.0, "zero3", 8).mode == "bf16_amp"  # sharded master
    assert choose(7_600_000_000, 0, 80.0).mode == "bf16_amp"  # LoRA: the frozen base in fp32, 30 GB
    assert choose(494_000_000, 494_000_000, 80.0, autocast=False).mode == "bf16_kahan"  # self-play


def test_the_cpu_still_trains_in_fp32_and_explicit_modes_stay(tmp_path: Path) -> None:
    assert _settled([], PlatformFacts(), CPU_TORCH, tmp_path).model.precision == "fp32"
    assert _settled(["model.precision=bf16_pure"], H100, CUDA_BF16, tmp_path).model.precision == "bf16_pure"
    assert _settled(["model.precision=bf16"], H100, CUDA_BF16, tmp_path).model.precision == "bf16_amp"


def test_pure_bf16_warns_at_learning_rates_its_weights_cannot_keep() -> None:
    line = pure_bf16_warning("bf16_pure", 5e-6)
    assert line and "\n" not in line and "bf16_pure at lr 5e-06" in line
    assert pure_bf16_warning("bf16_pure", 1e-2) is None and pure_bf16_warning("bf16_amp", 1e-6) is None


# --------------------------------------------------------------------------------- updates that land


@pytest.mark.parametrize("lr", [5e-6, 1e-6])
def test_the_h100_default_keeps_every_small_update_pure_bf16_loses_them(lr: float, tmp_path: Path) -> None:
    lr_set = [f"train.learning_rate={lr}"]
    ref_cfg = _settled([*lr_set, "model.precision=fp32"], PlatformFacts(), CPU_TORCH, tmp_path)
    default_cfg = _settled(lr_set, H100, CUDA_BF16, tmp_path)
    pure_cfg = _settled([*lr_set, "model.precision=bf16_pure"], H100, CUDA_BF16, tmp_path)
    assert (default_cfg.model.precision, pure_cfg.model.precision) == ("bf16_amp", "bf16_pure")

    out_dtypes: list[tuple[bool, torch.dtype]] = []

    def record(_m: Any, _i: Any, out: Any) -> None:
        out_dtypes.append((torch.is_grad_enabled(), out.dtype))

    def record_dtypes(model: Any) -> None:  # (grad enabled, output dtype) of every attention q_proj call
        for name, m in model.named_modules():
            if name.endswith("q_proj"):
                m.register_forward_hook(record)

    ref_before, ref_after, _ = _train(ref_cfg, tmp_path / "ref")
    before, after, trainer = _train(default_cfg, tmp_path / "default", record_dtypes)
    pure_before, pure_after, _ = _train(pure_cfg, tmp_path / "pure")

    assert trainer.args.bf16 and all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert _changed(before, after) >= 0.99
    assert _changed(before, after, "norm") >= _changed(ref_before, ref_after, "norm") - 0.01
    assert _update_norm(before, after) == pytest.approx(_update_norm(ref_before, ref_after), rel=0.01)
    # generation (no grad) and the training forward both ran in bf16 over the fp32 master weights
    assert {d for _, d in out_dtypes} == {torch.bfloat16} and {g for g, _ in out_dtypes} == {True, False}
    # the same steps on bf16-resident weights: most updates round away, RMSNorm weights never move
    assert _changed(pure_before, pure_after) < 0.2
    assert _changed(pure_before, pure_after, "norm") == 0.0
    assert _update_norm(pure_before, pure_after) < 0.5 * _update_norm(ref_before, ref_after)


def test_kahan_adamw_keeps_the_small_updates_of_bf16_weights(tmp_path: Path) -> None:
    sets = ["train.learning_rate=1e-6", "model.precision=bf16_kahan"]
    cfg = _settled(sets, H100, CUDA_BF16, tmp_path)
    ref = _settled([*sets[:1], "model.precision=fp32"], PlatformFacts(), CPU_TORCH, tmp_path)
    ref_before, ref_after, _ = _train(ref, tmp_path / "ref")
    before, after, trainer = _train(cfg, tmp_path / "kahan")
    assert type(trainer.optimizer.optimizer).__module__.startswith("optimi")
    assert all(p.dtype == torch.bfloat16 for p in trainer.model.parameters())
    # the bf16 weight plus its compensation moved everywhere, by about the fp32 reference's update
    assert _changed(before, after) >= 0.99 and _changed(before, after, "norm") >= 0.9
    assert _update_norm(before, after) == pytest.approx(_update_norm(ref_before, ref_after), rel=0.05)


# --------------------------------------------------------------------------------- generation in bf16


def test_generation_runs_in_bf16_and_leaves_the_master_weights_bitwise_alone() -> None:
    """TRL's continuous-batching path casts the model (``model.to(torch.bfloat16)``) before generating;
    ``bf16_generation`` lets it and restores every fp32 tensor, the same objects, afterwards."""
    from training_core.methods.precision_hooks import bf16_generation
    from training_core.models.shapes import build_model
    from training_core.models.tiny import SPEC

    model = build_model({k: v for k, v in SPEC.items() if k != "seed"} | {"vocab_size": 64})
    params = {n: (p, p.detach().clone()) for n, p in model.named_parameters()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    seen: list[torch.dtype] = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    prompt = torch.tensor([[5, 6, 7]])
    with bf16_generation(model), torch.no_grad():  # TRL's HF-generate path: autocast only
        model.generate(prompt, max_new_tokens=3, do_sample=False)
    with bf16_generation(model), torch.no_grad():  # its continuous-batching path casts first
        model.to(torch.bfloat16)
        assert next(model.parameters()).dtype == torch.bfloat16
        model.generate(prompt, max_new_tokens=3, do_sample=False)
    assert seen and set(seen) == {torch.bfloat16}
    for n, p in model.named_parameters():
        assert p is params[n][0] and p.dtype == torch.float32 and torch.equal(p, params[n][1]), n
    for n, b in model.named_buffers():
        assert b.dtype == buffers[n].dtype and torch.equal(b, buffers[n]), n


# --------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("mode", ["bf16", "bf16_kahan"])
def test_a_resumed_run_takes_the_same_next_update_as_an_uninterrupted_one(mode: str, tmp_path: Path) -> None:
    """The checkpoint holds the fp32 master weights (bf16_amp) or the bf16 weights and the Kahan
    compensation (bf16_kahan, in the optimizer's state): step 2 after resuming from checkpoint-1 lands
    on the very weights of step 2 without the interruption."""
    from training_core.run.layout import checkpoints_dir

    sets = ["train.learning_rate=1e-6", f"model.precision={mode}", "train.max_steps=2", "checkpoint.every=1"]
    cfg = _settled(sets, H100, CUDA_BF16, tmp_path)
    _, straight, trainer = _train(cfg, tmp_path / "straight")
    ckpt = checkpoints_dir(tmp_path / "straight") / "checkpoint-1"
    assert ckpt.is_dir()
    _, resumed, again = _train(cfg, tmp_path / "resumed", resume_from=ckpt)
    assert again.state.global_step == trainer.state.global_step == 2
    for n in straight:
        assert torch.equal(straight[n], resumed[n]), n
