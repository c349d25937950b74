"""Which machine we are on (CPU / V100 / A100 / H100 / other GPU), as plain facts tests can inject.

``detect()`` gathers the facts without importing torch (nvidia-smi, importlib.util.find_spec, env),
so ``--dry-run`` can show the preset that applies on a laptop or a GPU host alike. A CPU-only machine
is a normal platform (the team's earlier detector crashed there). ``auto`` settings resolve here:
precision (bf16 where supported, fp16 on V100, fp32 on CPU) and vLLM (only with a GPU and vLLM
importable). Recipes add per-platform presets as ``[platform.<name>]`` tables (see recipes.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import threading
from dataclasses import asdict, dataclass
from typing import Any

PLATFORMS = ("cpu", "v100", "a100", "h100", "gpu")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass(frozen=True)
class PlatformFacts:
    gpu_name: str = ""  # nvidia-smi's name of GPU 0; "" = no GPU
    gpu_count: int = 0
    gpu_memory_gb: float = 0.0  # total memory of GPU 0
    bf16: bool = False  # compute capability >= 8 (A100, H100, ...)
    offline: bool = False  # no route to the model hub
    vllm_available: bool = False  # `import vllm` would succeed

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
        train["use_vllm"] = facts.gpu_count > 0 and facts.vllm_available
        changes["train.use_vllm"] = {"from": "auto", "to": train["use_vllm"]}
    return changes


def detect(offline_probe: bool = True) -> PlatformFacts:
    """Facts of this machine. Env ``PIPPA_PLATFORM_OFFLINE=1/0`` overrides the hub probe."""
    name, count, mem = _nvidia_smi()
    bf16 = count > 0 and not any(old in name.upper() for old in ("V100", "T4", "P100", "K80"))
    return PlatformFacts(
        gpu_name=name,
        gpu_count=count,
        gpu_memory_gb=mem,
        bf16=bf16,
        offline=_offline(offline_probe),
        vllm_available=importlib.util.find_spec("vllm") is not None,
    )


def _nvidia_smi() -> tuple[str, int, float]:
    if shutil.which("nvidia-smi") is None:
        return "", 0, 0.0
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "", 0, 0.0
    rows = [r.split(",") for r in out.strip().splitlines() if r.strip()]
    if not rows:
        return "", 0, 0.0
    try:
        mem = float(rows[0][1]) / 1024
    except (IndexError, ValueError):
        mem = 0.0
    return rows[0][0].strip(), len(rows), mem


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
    """Offline hosts: tell HF libraries not to try the hub, and W&B to log locally (REFERENCE §4)."""
    if not facts.offline:
        return
    for key in _OFFLINE_ENV:
        os.environ.setdefault(key, "1")
    if os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
