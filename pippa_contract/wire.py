"""The wire between the laptop and the host agent: the verbs' names and the frame (``<n>\\n`` + n
bytes) that carries each request. Imported by the agent on the host: no typing, nothing slow."""

from __future__ import annotations

PROBE, INSTALL_UV, INSTALL_BWRAP = "probe", "install_uv", "install_bwrap"
LIST_RUNS, LAUNCH, STOP = "list_runs", "launch", "stop"
SLURM_SUBMIT, SLURM_STOP = "slurm_submit", "slurm_stop"
SYNC_LIST, SYNC_APPLY, SYNC_MARKER, WRITE_FILE = "sync_list", "sync_apply", "sync_marker", "write_file"
CHECK_PYTHON, RUN_CHECKPOINTS, REMOVE_RUNS = "check_python", "run_checkpoints", "remove_runs"
WANDB_SYNC, GPU_REPORT = "wandb_sync", "gpu_report"
DOCTOR, DOCTOR_HISTORY = "doctor", "doctor_history"  # `pippa doctor`; the results kept on the host
RECEIVE_RUN = "receive_run"  # a moved run's files follow the request on stdin (pippa resume --on)
LINK_PROGRAM = "link_program"  # a stable link to the host program of one version, pinned
SAMPLES = "samples"  # what the model wrote: rows of a run's samples.jsonl, read from its end
# Verbs that stream their answer (the caller owns the process; the last request of its process).
READ, FOLLOW, PULL = "read", "follow", "pull"
READ_RUN = "read_run"  # the listing, the run a name means there, then its output.log


def frame(data: bytes) -> bytes:
    """One request (or the program): its length in decimal, a newline, then the bytes."""
    return b"%d\n" % len(data) + data
