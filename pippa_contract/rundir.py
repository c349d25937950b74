"""The run directory, ``<remote_dir>/runs/<run-id>/``, and the files in it (docs/CONTRACTS.md).

Paths are host paths (POSIX) kept as strings: ``root`` may start with ``~/``, which the host expands.
"""

from __future__ import annotations

import re

RUNS = "runs"
RUN_JSON = "run.json"
CMD_SH = "cmd.sh"
OUTPUT_LOG = "output.log"
EXIT_CODE = "exit_code"
STOP_REQUESTED = "stop_requested"
STARTED = "started"
TMUX_SESSION = "tmux_session"
METRICS = "metrics.jsonl"
SUPERSEDED = "metrics.superseded.jsonl"
SAMPLES = "samples.jsonl"  # pippa_contract.samples
SAMPLES_SUPERSEDED = "samples.superseded.jsonl"
ALARMS_JSON = "alarms.json"  # pippa_contract.alarms
ALARMS_SENT = "alarms.sent"  # the alarms the host's alerts told (pippa_agent.alerts.alarms)
JOB_SBATCH = "job.sbatch"
SLURM_FREE_REQUEUES = "slurm_free_requeues"  # requeues after a time-limit save, not counted in --retry
SLURM_JOB = "slurm_job"
SUPERVISE_PY = "supervise.py"
ATTEMPTS_JSON = "attempts.json"
CHECKPOINTS = "checkpoints"
MOVED_TO = "moved_to"  # the host a run moved to (pippa resume RUN --on HOST): it goes on there
FORENSICS = "forensics"  # forensics/attempt-N/: what a stalled attempt was doing (pippa_agent.forensics)
LAUNCH_LOCK = ".launch.lock"  # in runs/: held while a launch claims its session and makes its run dirs
STAGING = ".staging"  # inside checkpoints/: where a checkpoint is written before its rename into place
ACCELERATE_YAML = "accelerate.yaml"  # the launcher's accelerate config (--processes, --hosts, SLURM)
VLLM_LOG = "vllm.log"  # the vLLM server's output when generation runs on its own GPU
SAVES = "saves.jsonl"  # a line per checkpoint write: {"step", "start", "end"} (the ledger's checkpoint part)
BUDGET_STOP = "budget_stop"  # the host's daily_budget is spent: its supervisor saves and stops it (ledger)
# A checkpoint directory in checkpoints/: ``checkpoint-<step>``, the name TRL/transformers give it.
CHECKPOINT_PREFIX = "checkpoint-"
CHECKPOINT_RE = re.compile(r"^checkpoint-([0-9]+)$")
# What a resumed run's directory loses (the next attempt writes them again).
RUN_STATE_FILES = (EXIT_CODE, EXIT_CODE + ".tmp", STARTED, STOP_REQUESTED, TMUX_SESSION)


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step}"


def checkpoint_step(name: str) -> int | None:
    """The step of a ``checkpoint-<step>`` name; None for any other name (``.staging`` included)."""
    m = CHECKPOINT_RE.match(name)
    return int(m.group(1)) if m else None


def checkpoint_names(names: list[str]) -> list[str]:
    """The checkpoint names among ``names``, oldest (lowest step) first."""
    return sorted(
        (n for n in names if CHECKPOINT_RE.match(n)), key=lambda n: int(n[len(CHECKPOINT_PREFIX) :])
    )


def runs_dir(root: str) -> str:
    return f"{root.rstrip('/')}/{RUNS}"


class RunDir:
    """One run's directory under a host's ``remote_dir`` (``root``). A plain class, not a NamedTuple:
    the agent imports this module on the host, where typing costs ~5 ms."""

    __slots__ = ("root", "run_id")

    def __init__(self, root: str, run_id: str) -> None:
        self.root = root
        self.run_id = run_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and (self.root, self.run_id) == (other.root, other.run_id)

    def __hash__(self) -> int:
        return hash((self.root, self.run_id))

    def __repr__(self) -> str:
        return f"RunDir({self.root!r}, {self.run_id!r})"

    @property
    def path(self) -> str:
        return f"{runs_dir(self.root)}/{self.run_id}"

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    @property
    def run_json(self) -> str:
        return self.file(RUN_JSON)

    @property
    def cmd_sh(self) -> str:
        return self.file(CMD_SH)

    @property
    def output_log(self) -> str:
        return self.file(OUTPUT_LOG)

    @property
    def exit_code(self) -> str:
        return self.file(EXIT_CODE)

    @property
    def metrics(self) -> str:
        return self.file(METRICS)

    @property
    def samples(self) -> str:
        return self.file(SAMPLES)

    @property
    def alarms(self) -> str:
        return self.file(ALARMS_JSON)

    @property
    def checkpoints(self) -> str:
        return self.file(CHECKPOINTS)

    def checkpoint(self, name: str) -> str:
        """A checkpoint's directory: ``checkpoints/<name>``."""
        return f"{self.checkpoints}/{name}"
