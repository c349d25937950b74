"""The run directory's layout as the trainer uses it, as ``Path``s: the names are the contract's
(``pippa_contract.rundir``, docs/CONTRACTS.md): ``<run-dir>/metrics.jsonl`` (the run's record),
``metrics.superseded.jsonl`` (lines a resume redid), ``checkpoints/checkpoint-<step>`` directories,
each renamed into place from ``checkpoints/.staging`` once complete, and the launcher's
``accelerate.yaml`` and ``vllm.log``. The run id is the directory's name (pippa_contract.names).
Torch-free."""

from __future__ import annotations

from pathlib import Path

from pippa_contract.rundir import CHECKPOINTS as CHECKPOINTS
from pippa_contract.rundir import METRICS as METRICS
from pippa_contract.rundir import SAVES as SAVES
from pippa_contract.rundir import STAGING as STAGING
from pippa_contract.rundir import SUPERSEDED as SUPERSEDED
from pippa_contract.rundir import checkpoint_name as checkpoint_name
from pippa_contract.rundir import checkpoint_step

# a run over several hosts with no shared file system (training_core.launch --checkpoint-each-host): set
# for the trainer's ranks, so each host's first process saves a whole checkpoint (methods.trainer)
EACH_HOST_ENV = "PIPPA_CHECKPOINT_EACH_HOST"


def metrics_path(run_dir: Path) -> Path:
    return run_dir / METRICS


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINTS


def checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (staging directories are never listed)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(s, p) for p in ckpt_dir.iterdir() if (s := checkpoint_step(p.name)) is not None and p.is_dir()]
    return sorted(found)


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def resume_checkpoint(ckpt_dir: Path, main: bool) -> Path | None:
    """The newest whole checkpoint (pippa_contract.checkpoint_check): a torn one is passed over with
    one line each (and set aside by the main process), never resumed from."""
    import os

    from pippa_contract.checkpoint_check import CHECKED_ENV, pick

    step, skipped = pick(str(ckpt_dir), os.environ.get(CHECKED_ENV, ""), set_aside=main)
    for line in skipped if main else []:
        print(f"resume: {line}", flush=True)
    return None if step is None else ckpt_dir / checkpoint_name(step)
