"""The run directory's layout (docs/CONTRACTS.md), named in this one module so the shared contract
package can replace it: ``<run-dir>/metrics.jsonl`` (the run's record), ``metrics.superseded.jsonl``
(lines a resume redid), ``checkpoints/checkpoint-<step>`` directories, each renamed into place from
``checkpoints/.staging`` once complete, and the launcher's ``accelerate.yaml`` and ``vllm.log``.
The run id is the directory's name (pippa_contract.names). Torch-free."""

from __future__ import annotations

import re
from pathlib import Path

METRICS = "metrics.jsonl"
SUPERSEDED = "metrics.superseded.jsonl"
CHECKPOINTS = "checkpoints"
STAGING = ".staging"  # inside checkpoints/: where a checkpoint is written before its rename into place
ACCELERATE_CONFIG = "accelerate.yaml"
VLLM_LOG = "vllm.log"
CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def metrics_path(run_dir: Path) -> Path:
    return run_dir / METRICS


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINTS


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step}"


def checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (staging directories are never listed)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := CKPT_RE.match(p.name)) and p.is_dir()]
    return sorted(found)


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = checkpoints(ckpt_dir)
    return found[-1][1] if found else None
