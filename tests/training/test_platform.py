"""Platform presets apply from injected device facts; a CPU is a normal platform."""

from __future__ import annotations

import pytest

from training_core.errors import UsageError
from training_core.hardware.platform import PlatformFacts, TorchFacts, bf16_capable, train_precision
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
    assert res.platform["preset"]["train.per_device_train_batch_size"] == {"from": 0, "to": 16}


def test_set_wins_over_the_preset() -> None:
    res = resolve("overfit", ["model.gradient_checkpointing=false", "train.use_vllm=false"], H100_VLLM)
    assert not res.config.model.gradient_checkpointing and res.config.train.use_vllm is False


# --------------------------------------------------------------------------------- precision at run time

RTX2080 = PlatformFacts(gpu_name="NVIDIA GeForce RTX 2080", gpu_count=1, compute_capability=7.5)
H100_FACTS = PlatformFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, bf16=True, compute_capability=9.0)
CUDA_BF16 = TorchFacts("2.13.0+cu128", "12.8", cuda_available=True, bf16_supported=True)
CUDA_NO_BF16 = TorchFacts("2.13.0+cu128", "12.8", cuda_available=True, bf16_supported=False)
CPU_BUILD = TorchFacts("2.13.0+cpu", None)


def test_bf16_follows_compute_capability_not_the_name() -> None:
    assert not bf16_capable("NVIDIA GeForce RTX 2080", 7.5) and bf16_capable("NVIDIA GeForce RTX 3090", 8.6)
    assert bf16_capable("NVIDIA H100 80GB HBM3", 0.0) and not bf16_capable("Some Future GPU", 0.0)
    assert not bf16_capable("Tesla V100-SXM2-32GB", 7.0)


def test_an_rtx_2080_trains_in_fp16_where_bf16_was_asked() -> None:
    assert resolve("baseline", [], RTX2080).config.model.precision == "fp16"  # auto, by capability
    precision, note = train_precision("bf16", RTX2080, CUDA_NO_BF16)  # a recipe that insists on bf16
    assert precision == "fp16" and note and "no bf16" in note


def test_bf16_where_torch_supports_it_and_fp32_on_a_cpu() -> None:
    assert train_precision("bf16", H100_FACTS, CUDA_BF16) == ("bf16", None)
    assert train_precision("bf16_amp", H100_FACTS, CUDA_BF16) == ("bf16_amp", None)
    assert train_precision("fp32", PlatformFacts(), CPU_BUILD) == ("fp32", None)
    precision, note = train_precision("bf16", PlatformFacts(), CPU_BUILD)
    assert precision == "fp32" and note and "needs a CUDA GPU" in note


def test_a_gpu_host_with_a_cpu_build_of_torch_gets_one_clear_line() -> None:
    with pytest.raises(UsageError) as e:
        train_precision("bf16", H100_FACTS, CPU_BUILD)
    msg = str(e.value)
    assert "\n" not in msg and "CPU-only build" in msg and "H100" in msg and "download.pytorch.org" in msg
    no_smi = PlatformFacts(nvidia_devices=True)  # device files but no nvidia-smi on PATH
    with pytest.raises(UsageError, match="CPU-only build"):
        train_precision("fp16", no_smi, CPU_BUILD)
    with pytest.raises(UsageError, match="finds no GPU"):
        train_precision("bf16", H100_FACTS, TorchFacts("2.13.0+cu128", "12.8"))
    assert train_precision("fp32", H100_FACTS, CPU_BUILD) == ("fp32", None)  # asked for the CPU
