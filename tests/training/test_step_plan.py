"""The GPU step's auto settings (training_core.run.step_plan): sized from the memory estimate, on-policy,
and the CPU path unchanged."""

from __future__ import annotations

import pytest

from training_core.hardware.platform import PlatformFacts
from training_core.models.shapes import QWEN2_0_5B, QWEN2_5_1_5B
from training_core.recipes import resolve
from training_core.run import step_plan
from training_core.run.flops import old_logprob_forward

H100 = PlatformFacts(
    gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80, bf16=True, compute_capability=9.0
)


def test_the_estimate_counts_qwen2_0_5b_weights_within_a_percent() -> None:
    assert step_plan.dims_of(QWEN2_0_5B).params == pytest.approx(494_032_768, rel=0.01)
    assert step_plan.dims_of(QWEN2_5_1_5B).params == pytest.approx(1_543_714_304, rel=0.01)


@pytest.mark.parametrize("spec", [QWEN2_0_5B, QWEN2_5_1_5B])
def test_a_big_card_trains_512_completions_on_policy_without_checkpointing(spec: dict) -> None:
    d = step_plan.dims_of(spec)
    step = step_plan.plan(d, 80, True, batch=512, prompt=200, completion=256)
    assert not step.checkpointing and step.per_device * step.accumulation == 512
    assert step.estimate_gb <= 0.9 * 80
    assert not old_logprob_forward(step.per_device, step.accumulation, 512, 1, False)
    # a bigger card never gets a smaller micro-batch; a small one turns checkpointing on before giving up
    assert step_plan.plan(d, 141, True, 512, 200, 256).per_device >= step.per_device
    small = step_plan.plan(d, 8, True, 512, 200, 256)
    assert small.per_device < step.per_device and small.per_device * small.accumulation == 512


def test_checkpointing_turns_on_only_where_the_step_does_not_fit_without() -> None:
    d = step_plan.dims_of(QWEN2_5_1_5B)
    tight = step_plan.plan(d, 24, True, 64, 512, 256)
    assert tight.checkpointing and tight.per_device >= step_plan.MIN_MICRO
    assert step_plan.peak_bytes(d, True, step_plan.MIN_MICRO, 512, 256, 64, False) > 0.9 * 24e9
    roomy = step_plan.plan(d, 80, True, 64, 512, 256)
    assert not roomy.checkpointing


def test_max_gpu_is_auto_on_a_gpu_and_settles_to_one_micro_batch_on_a_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu = resolve("max_gpu", [], H100).config
    assert (gpu.train.per_device_train_batch_size, gpu.model.gradient_checkpointing) == (0, "auto")
    assert gpu.train.generation_batch_size == 512 and gpu.generation.engine == "auto"
    res = resolve("max_gpu", [], H100)
    settled = step_plan.settle(res, 80.0, lambda: QWEN2_0_5B).config
    t = settled.train
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps == 512
    assert settled.model.gradient_checkpointing is False
    assert capsys.readouterr().out.startswith(f"step: {t.per_device_train_batch_size} completions x ")
    on_cpu = step_plan.settle(res, 0.0, lambda: pytest.fail("no estimate without a GPU")).config
    assert (on_cpu.train.per_device_train_batch_size, on_cpu.model.gradient_checkpointing) == (512, False)


def test_a_recipe_without_auto_is_left_as_it_is() -> None:
    res = resolve("tiny", [], PlatformFacts())
    assert step_plan.settle(res, 80.0, lambda: pytest.fail("not read")) is res


def test_the_largest_generation_batch_is_the_last_that_fits_and_doubling_it_does_not() -> None:
    """max_gpu's memory goal is a batch, not a share of memory: the bench prints the largest that the
    estimate puts under 90% of the card (bench/gpu_perf/part_s.py)."""
    d = step_plan.dims_of(QWEN2_0_5B)
    batch, step = step_plan.largest_batch(d, 80.0, False, 200, 256) or (0, None)
    assert step is not None and batch >= 512 and batch % 8 == 0
    assert step.estimate_gb <= step_plan.BUDGET * 80.0
    bigger = step_plan.plan(d, 80.0, False, batch * 2, 200, 256)
    assert bigger.estimate_gb > step_plan.BUDGET * 80.0 or batch * 2 > 65536
    small = step_plan.largest_batch(d, 24.0, False, 200, 256)
    assert small is not None and small[0] < batch  # a smaller card, a smaller batch
    assert step_plan.largest_batch(d, 1.0, False, 200, 256) is None  # not even one prompt's completions
