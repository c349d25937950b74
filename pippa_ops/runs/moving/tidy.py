"""Tidying run directories: ``pippa rm`` and ``pippa prune``. A running or queued run is never touched.

The laptop picks the runs from the states it derives (``runs.records.listing``); the host agent refuses again
a run directory without an exit code whose tmux session is alive, and measures what it removes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pippa_contract import verbs
from pippa_ops.runs.records.listing import RunRecord
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport


@dataclass(frozen=True)
class Removal:
    """What was (or, on a dry run, would be) removed on one host."""

    host: str
    removed: tuple[str, ...]
    bytes: int
    refused: dict[str, str] = field(default_factory=dict)  # run id -> why it was left alone


def active_refusals(records: Sequence[RunRecord]) -> dict[str, str]:
    """The runs that must not be removed, and why (they are still going)."""
    return {r.run_id: f"it is {r.state}; pippa stop {r.run_id} first" for r in records if r.active}


def prune_candidates(
    records: Sequence[RunRecord], older_than: float, checkpoints: dict[str, bool] | None = None
) -> list[RunRecord]:
    """Ended runs that ended (or started) before ``older_than`` (unix s); with ``checkpoints`` (run id
    -> has any), runs that have checkpoints are left out."""
    out = []
    for r in records:
        when = r.ended or r.started or 0.0
        if r.active or when >= older_than:
            continue
        if checkpoints is not None and checkpoints.get(r.run_id):
            continue
        out.append(r)
    return out


def has_checkpoints(transport: Transport, remote_dir: str, run_ids: Sequence[str]) -> dict[str, bool]:
    """Run id -> whether its run directory holds a checkpoint (one agent process for all)."""
    with agent_client.Session(transport) as agent:
        return {rid: bool(checkpoints(agent, remote_dir, rid)) for rid in run_ids}


def checkpoints(agent: agent_client.Session, remote_dir: str, run_id: str) -> list[str]:
    """The run's checkpoint directory names, oldest first (``checkpoint-N``), torn ones left out."""
    return checked_checkpoints(agent, remote_dir, run_id)[0]


def checked_checkpoints(
    agent: agent_client.Session, remote_dir: str, run_id: str
) -> tuple[list[str], list[str]]:
    """``checkpoints``, and one line per torn one the host passed over and set aside."""
    return verbs.run_checkpoints(agent, remote_dir, run_id)


def remove_runs(transport: Transport, remote_dir: str, run_ids: Sequence[str], *, dry_run: bool) -> Removal:
    answer = verbs.remove_runs(agent_client.Once(transport), remote_dir, run_ids, dry_run)
    refused = {str(k): str(v) for k, v in (answer.get("refused") or {}).items()}
    return Removal(transport.name, tuple(answer.get("removed") or ()), int(answer.get("bytes") or 0), refused)
