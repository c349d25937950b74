"""The free space a host's runs need: the doctor's disk check warns below a floor sized from the model
the host trains (issue 44), not only at a fixed percentage.

The floor is the largest ``newest checkpoint x checkpoint.keep`` among the host's runs (a checkpoint's
size from its manifest, pippa_contract.checkpoint_check, else from its files; ``keep`` from the run's
metrics header, 2 when it has none), plus headroom: a tenth of that, at least 1 GiB (logs, metrics,
the staging copy of the next save). A host with no checkpoint yet has no floor."""

from __future__ import annotations

import json
import os

from pippa_contract import rundir as rd
from pippa_contract.checkpoint_check import MANIFEST
from pippa_contract.diskspace import size_text

HEADROOM_MIN = 1 << 30
DEFAULT_KEEP = 2  # training_core.config's checkpoint.keep
MAX_RUNS = 200  # the newest run directories looked at (a host with thousands of old runs stays quick)


def _size(ckpt: str) -> int:
    try:
        with open(os.path.join(ckpt, MANIFEST), "rb") as f:
            files = json.loads(f.read())["files"]
        return sum(int(v["size"]) for v in files.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    total = 0
    for top, _dirs, names in os.walk(ckpt):
        for name in names:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                continue
    return total


def _keep(run_dir: str) -> int:
    """checkpoint.keep from the run's metrics header (its resolved config)."""
    try:
        with open(os.path.join(run_dir, rd.METRICS), "rb") as f:
            header = json.loads(f.readline())
        return max(1, int(header["config"]["checkpoint"]["keep"]))
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_KEEP


def checkpoint_floor(runs_dir: str) -> tuple[int, str] | None:
    """(bytes, how it was sized) for the host's runs under ``runs_dir``; None without a checkpoint."""
    try:
        runs = sorted(os.scandir(runs_dir), key=lambda e: e.stat().st_mtime, reverse=True)[:MAX_RUNS]
    except OSError:
        return None
    best: tuple[int, str] | None = None
    for run in runs:
        ckpts = os.path.join(run.path, rd.CHECKPOINTS)
        try:
            names = rd.checkpoint_names(os.listdir(ckpts))
        except OSError:
            continue
        if not names:
            continue
        size, keep = _size(os.path.join(ckpts, names[-1])), _keep(run.path)
        if best is None or size * keep > best[0]:
            best = (size * keep, f"{run.name}'s {names[-1]} {size_text(size)} x checkpoint.keep {keep}")
    if best is None:
        return None
    need, how = best
    return need + max(HEADROOM_MIN, need // 10), f"{how} + headroom"
