"""Self-play checkpoints: the model and tokenizer (``save_pretrained``, so ``python -m training_core.eval``
and a later recipe load them like any model) plus ``selfplay_state.pt`` with what resuming needs: the
optimizer, the LR schedule, the role baselines, the RNG states and the step. Written into
``checkpoints/.staging`` and renamed into place, like the GRPO trainer's (docs/CONTRACTS.md)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

from pippa_contract.checkpoint_check import write_manifest
from training_core.run.layout import STAGING, checkpoint_name, checkpoints

STATE_FILE = "selfplay_state.pt"


def save(
    ckpt_root: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    optimizer: Any,
    scheduler: Any,
    baselines: dict[str, Any],
    rng: random.Random,
    keep: int,
) -> Path:
    import torch

    staging = ckpt_root / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # leftovers of a killed save
    staging.mkdir(parents=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    torch.save(
        {
            "step": step,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "baselines": baselines,
            "python_rng": rng.getstate(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
        staging / STATE_FILE,
    )
    write_manifest(str(staging))  # last: pippa_contract.checkpoint_check
    target = ckpt_root / checkpoint_name(step)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    for _, old in checkpoints(ckpt_root)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load(path: Path, optimizer: Any, scheduler: Any, rng: random.Random) -> tuple[int, dict[str, Any]]:
    """Restore optimizer, schedule and RNGs in place; returns (step, baselines state)."""
    import torch

    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    rng.setstate(state["python_rng"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"]), state["baselines"]
