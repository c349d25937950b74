"""Platform presets apply from injected device facts; a CPU is a normal platform."""

from __future__ import annotations

from training_core.platform import PlatformFacts
from training_core.recipes import resolve

A100 = PlatformFacts(gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=8, gpu_memory_gb=80, bf16=True)
H100_VLLM = PlatformFacts(
    gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80, bf16=True, vllm_available=True
)
V100 = PlatformFacts(gpu_name="Tesla V100-SXM2-32GB", gpu_count=1, gpu_memory_gb=32)


def test_platform_names_from_gpu_names() -> None:
    assert PlatformFacts().platform == "cpu"
    assert (V100.platform, A100.platform, H100_VLLM.platform) == ("v100", "a100", "h100")
    assert PlatformFacts(gpu_name="NVIDIA L4", gpu_count=1, bf16=True).platform == "gpu"


def test_cpu_runs_fp32_without_vllm() -> None:
    res = resolve("baseline", [], PlatformFacts(vllm_available=True))
    assert res.config.model.precision == "fp32" and res.config.train.use_vllm is False
    assert res.platform["name"] == "cpu"


def test_h100_gets_bf16_checkpointing_and_vllm_when_importable() -> None:
    res = resolve("overfit", [], H100_VLLM)
    assert res.config.model.precision == "bf16" and res.config.model.gradient_checkpointing
    assert res.config.train.use_vllm is True and res.config.train.vllm_mode == "colocate"
    assert res.platform["preset"]["model.gradient_checkpointing"] == {"from": False, "to": True}
    no_vllm = resolve("overfit", [], PlatformFacts(gpu_name="NVIDIA A100", gpu_count=1, bf16=True))
    assert no_vllm.config.train.use_vllm is False


def test_v100_preset_uses_fp16_and_the_recipe_batch_override() -> None:
    res = resolve("max_gpu", [], V100)
    assert res.config.model.precision == "fp16"
    assert res.config.train.per_device_train_batch_size == 16
    assert res.platform["preset"]["train.per_device_train_batch_size"] == {"from": 64, "to": 16}


def test_set_wins_over_the_preset() -> None:
    res = resolve("overfit", ["model.gradient_checkpointing=false", "train.use_vllm=false"], H100_VLLM)
    assert not res.config.model.gradient_checkpointing and res.config.train.use_vllm is False
