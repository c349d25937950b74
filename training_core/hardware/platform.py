"""Which machine we are on (CPU / V100 / A100 / H100 / other GPU), as plain facts tests can inject.

``detect()`` gathers the facts without importing torch (nvidia-smi, importlib.util.find_spec, env),
so ``--dry-run`` can show the preset that applies on a laptop or a GPU host alike. A CPU-only machine
is a normal platform (the team's earlier detector crashed there). ``auto`` settings resolve here:
precision (bf16 where the GPU's compute capability is >= 8.0, which the run settles at start into fp32
master weights or Kahan-compensated bf16 weights (training_core.hardware.precision); else fp16 on a
GPU, fp32 on CPU) and
vLLM (only with a GPU and vLLM importable). Recipes add per-platform presets as ``[platform.<name>]``
tables (see recipes.py). At run time ``train_precision`` checks the resolved precision against what
the installed torch can do (``TorchFacts``): bf16 only where ``torch.cuda.is_bf16_supported()``, and
one clear error for a GPU host whose torch is a CPU build.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training_core.errors import UsageError
from training_core.hardware.precision import BF16_MODES

PLATFORMS = ("cpu", "v100", "a100", "h100", "gpu")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass(frozen=True)
class PlatformFacts:
    gpu_name: str = ""  # nvidia-smi's name of GPU 0; "" = no GPU
    gpu_count: int = 0
    gpu_memory_gb: float = 0.0  # total memory of GPU 0
    bf16: bool = False  # compute capability >= 8.0 (A100, H100, L4, RTX 30xx+); an RTX 2080 (7.5) has none
    offline: bool = False  # no route to the model hub
    vllm_available: bool = False  # `import vllm` would succeed
    compute_capability: float = 0.0  # nvidia-smi's compute_cap of GPU 0; 0 = unknown or no GPU
    nvidia_devices: bool = False  # /dev/nvidia0 exists (a GPU host, even when nvidia-smi is missing)

    @property
    def platform(self) -> str:
        if self.gpu_count == 0:
            return "cpu"
        name = self.gpu_name.upper()
        if "V100" in name:
            return "v100"
        if "A100" in name:
            return "a100"
        if "H100" in name or "H200" in name:
            return "h100"
        return "gpu"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "platform": self.platform}


def resolve_auto(config: dict[str, Any], facts: PlatformFacts) -> dict[str, Any]:
    """Replace "auto" precision / use_vllm in a config dict by their platform values; returns the changes."""
    changes: dict[str, Any] = {}
    model, train = config["model"], config["train"]
    if model.get("precision") == "auto":
        if facts.gpu_count == 0:
            model["precision"] = "fp32"
        else:
            model["precision"] = "bf16" if facts.bf16 else "fp16"
        changes["model.precision"] = {"from": "auto", "to": model["precision"]}
    if train.get("use_vllm") == "auto":
        # an engine named other than vllm is the user's choice: vLLM stays off then
        engine = config.get("generation", {}).get("engine", "auto")
        train["use_vllm"] = facts.gpu_count > 0 and facts.vllm_available and engine in ("auto", "vllm")
        changes["train.use_vllm"] = {"from": "auto", "to": train["use_vllm"]}
    return changes


# bf16 by name only when the driver is too old to report compute_cap (>= 8.0 parts we rent).
_BF16_NAMES = ("A100", "H100", "H200", "B200", "A10", "L4", "L40")


def bf16_capable(name: str, compute_capability: float) -> bool:
    """bf16 tensor cores need compute capability 8.0 (Ampere); by name only when it is unknown."""
    if compute_capability > 0:
        return compute_capability >= 8.0
    return any(n in name.upper() for n in _BF16_NAMES)


def detect(offline_probe: bool = True) -> PlatformFacts:
    """Facts of this machine. Env ``PIPPA_PLATFORM_OFFLINE=1/0`` overrides the hub probe."""
    name, count, mem, cap = _nvidia_smi()
    return PlatformFacts(
        gpu_name=name,
        gpu_count=count,
        gpu_memory_gb=mem,
        bf16=count > 0 and bf16_capable(name, cap),
        offline=_offline(offline_probe),
        vllm_available=importlib.util.find_spec("vllm") is not None,
        compute_capability=cap,
        nvidia_devices=Path("/dev/nvidia0").exists(),
    )


def _nvidia_smi() -> tuple[str, int, float, float]:
    """(name, count, memory GB, compute capability) of GPU 0; compute_cap needs driver >= 510."""
    if shutil.which("nvidia-smi") is None:
        return "", 0, 0.0, 0.0
    for fields in ("name,memory.total,compute_cap", "name,memory.total"):
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        rows = [[c.strip() for c in r.split(",")] for r in out.strip().splitlines() if r.strip()]
        if not rows:
            return "", 0, 0.0, 0.0
        return rows[0][0], len(rows), _float(rows[0], 1) / 1024, _float(rows[0], 2)
    return "", 0, 0.0, 0.0


def _float(row: list[str], i: int) -> float:
    try:
        return float(row[i])
    except (IndexError, ValueError):
        return 0.0


@dataclass(frozen=True)
class TorchFacts:
    """What the installed torch can do (``torch_facts()``), injectable in tests."""

    version: str = ""
    cuda_build: str | None = None  # torch.version.cuda; None = a CPU-only build
    cuda_available: bool = False  # torch.cuda.is_available()
    bf16_supported: bool = False  # torch.cuda.is_bf16_supported() (False without CUDA)


def torch_facts() -> TorchFacts:
    import torch

    cuda = torch.cuda.is_available()
    return TorchFacts(
        version=str(torch.__version__),
        cuda_build=torch.version.cuda,
        cuda_available=cuda,
        bf16_supported=cuda and torch.cuda.is_bf16_supported(),
    )


def train_precision(precision: str, facts: PlatformFacts, tf: TorchFacts) -> tuple[str, str | None]:
    """The precision to train in, from the resolved setting and what torch can do: (precision, note).

    A GPU host whose torch cannot reach the GPU is a UsageError with one line saying why (a CPU build
    of torch, or a CUDA build that finds no device), not HF's raw "Your setup doesn't support bf16/gpu";
    ``model.precision = "fp32"`` still trains on the CPU there. bf16 on a GPU without it (RTX 2080,
    V100, T4) becomes fp16 with a note.
    """
    gpu_host = facts.gpu_count > 0 or facts.nvidia_devices
    if gpu_host and not tf.cuda_available and precision != "fp32":
        gpu = facts.gpu_name or "/dev/nvidia0"
        if tf.cuda_build is None:
            raise UsageError(
                f"this host has an NVIDIA GPU ({gpu}) but torch {tf.version} is a CPU-only build: install "
                "a CUDA build (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128) "
                "or set model.precision=fp32 to train on the CPU"
            )
        raise UsageError(
            f"torch {tf.version} (CUDA {tf.cuda_build}) finds no GPU although this host has one ({gpu}): "
            "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, or set model.precision=fp32"
        )
    if not tf.cuda_available:
        if precision in BF16_MODES or precision == "fp16":
            return "fp32", f"model.precision {precision} needs a CUDA GPU; training in fp32 on the CPU"
        return "fp32", None
    if precision in BF16_MODES and not tf.bf16_supported:
        name = facts.gpu_name or "this GPU"
        return "fp16", f"{name} has no bf16 (torch.cuda.is_bf16_supported() is False): training in fp16"
    if precision == "fp32" or precision in BF16_MODES or precision == "fp16":
        return precision, None
    # "auto" never reaches here after resolve_auto, but a caller without a recipe may pass it; "bf16" is
    # settled into bf16_amp or bf16_kahan by training_core.models.settle.
    return ("bf16" if tf.bf16_supported else "fp16"), None


def _offline(probe: bool) -> bool:
    forced = os.environ.get("PIPPA_PLATFORM_OFFLINE")
    if forced is not None:
        return forced not in ("", "0", "false")
    if any(os.environ.get(k) not in (None, "", "0") for k in _OFFLINE_ENV):
        return True
    if not probe:
        return False
    # DNS lookups ignore socket timeouts, so probe in a daemon thread and stop waiting after 2 s.
    reached: list[bool] = []

    def attempt() -> None:
        try:
            socket.create_connection(("huggingface.co", 443), timeout=2).close()
            reached.append(True)
        except OSError:
            pass

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(2.5)
    return not reached


def apply_offline_env(facts: PlatformFacts) -> None:
    """Offline hosts: tell HF libraries not to try the hub, and W&B to log locally."""
    if not facts.offline:
        return
    for key in _OFFLINE_ENV:
        os.environ.setdefault(key, "1")
    if os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
