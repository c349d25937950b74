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
ACTIVE = (RUNNING, QUEUED)
ALL = (FAILED, DIVERGED, LOST, RUNNING, QUEUED, KILLED, STOPPED, CANCELLED, FINISHED)

SLURM_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
