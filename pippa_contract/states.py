"""Run states, as the laptop derives them from a run directory's files (docs/CONTRACTS.md), and the
SLURM job states that decide a batch run's."""

from __future__ import annotations

RUNNING = "running"  # its own session (or SLURM job) is alive and the job has started
QUEUED = "queued"  # alive, not started yet (a sweep's run waiting its turn, a pending SLURM job)
FINISHED = "finished"  # exit 0
FAILED = "failed"  # any other exit status
DIVERGED = "diverged"  # non-zero exit and the metrics end line says diverged
STOPPED = "stopped"  # an exit status after `pippa stop`
KILLED = "killed"  # no exit status, stop requested, had started
CANCELLED = "cancelled"  # no exit status, stop requested, never started
LOST = "lost"  # no exit status, no session, no stop: `pippa recover` resumes it
MOVED = "moved"  # ended here and moved to another host (the ``moved_to`` file names it)
ACTIVE = (RUNNING, QUEUED)
# Worst first: a multi-host run's state is its ranks' first in this order (a rank that died fails the
# run, then any rank still going keeps it going, then the way the ranks ended;
# runs.records.listing.merge_group).
ALL = (FAILED, DIVERGED, LOST, RUNNING, QUEUED, KILLED, STOPPED, CANCELLED, FINISHED, MOVED)

# SLURM job states (squeue / scontrol / sacct): the agent asks again about a job while it may still
# run; the laptop reads a job that waits or runs as the run's state.
SLURM_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
SLURM_WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "REQUEUE_HOLD", "SUSPENDED")
SLURM_RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")


def derive_state(
    *,
    session_alive: bool,
    exit_code: int | None,
    started: bool,
    stop_requested: bool,
) -> str:
    """A tmux run's state from its files and whether its own session is alive (pure)."""
    if exit_code is not None:
        if stop_requested:
            return STOPPED
        return FINISHED if exit_code == 0 else FAILED
    if session_alive:
        return RUNNING if started else QUEUED
    if stop_requested:
        return KILLED if started else CANCELLED
    return LOST  # no exit status, no session, nobody asked it to stop (host reboot, tmux killed)


def slurm_state(state: str, *, exit_code: int | None, started: bool, stop_requested: bool) -> str:
    """A SLURM run's state: its files say how the run ended; while they do not, the job's state says
    whether it waits (queued), runs, or ended without the script recording it (cancelled, killed,
    failed: a time limit, a node failure, out of memory)."""
    if exit_code is not None:
        return derive_state(
            session_alive=False, exit_code=exit_code, started=started, stop_requested=stop_requested
        )
    if state in SLURM_WAITING:
        return QUEUED
    if state in SLURM_RUNNING:
        return RUNNING
    if state == "CANCELLED":
        return KILLED if started else CANCELLED
    if state in ("COMPLETED", "UNKNOWN", ""):
        return LOST
    return FAILED  # FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED
