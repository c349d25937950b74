"""Where a run's checkpoints are: ``<run-dir>/checkpoints/checkpoint-<step>`` directories, each renamed
into place once complete (docs/CONTRACTS.md). Torch-free, shared by the GRPO and self-play trainers."""

from __future__ import annotations

import re
from pathlib import Path

CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
STAGING = ".staging"  # where a checkpoint is written before its rename into place (docs/CONTRACTS.md)


def checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (staging directories are never listed)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := CKPT_RE.match(p.name)) and p.is_dir()]
    return sorted(found)


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = checkpoints(ckpt_dir)
    return found[-1][1] if found else None
