"""The exit status of a run's process tree by failure class, for engines that retry by exit code.

SLURM's requeue, SkyPilot's ``job_recovery.recover_on_exit_codes`` and a shell loop see only the exit
status of the process they started (cmd.sh's supervisor, job.sbatch, the trainer). Every class that is
the infrastructure's fault ends that process with its own status, so such an engine retries exactly
these and leaves the user's failures alone:

- the supervisor (pippa_agent.supervise), when it hands an attempt of class ``lost``, ``nccl``,
  ``stalled`` or ``gpu-fault`` out rather than retrying it itself (``--infra-retries 0``, or spent);
- the trainer (training_core.run.lifecycle), when an outside engine asked it to save and stop:
  SIGUSR1 (SLURM's ``--signal=B:USR1@N`` before the time limit) ends it ``timelimit``, SIGUSR2 (a
  preemption notice) ``preempted``, both after the checkpoint of the current step.

User failures keep their statuses: ``config`` 2 (training_core.errors.UsageError), ``crash`` and
``diverged`` 1 (a diverged run says so in its metrics end line, not its status). The values avoid 0, 1,
2, sysexits.h's 64-78, timeout(1)'s 124-125, the shell's 126-127 and 128 + signal. docs/CONTRACTS.md
holds the same table (tests/contract/test_exitcodes.py compares them).

Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import signal

from pippa_contract import failures as fc

# Classes no rule of failures.classify finds from a log: the trainer's own exit statuses say them.
TIMELIMIT, PREEMPTED = "timelimit", "preempted"

# The infrastructure's classes and the exit status of the process tree that ended with each.
INFRA_EXIT = {
    fc.LOST: 90,
    fc.NCCL: 91,
    fc.STALLED: 92,
    fc.GPU_FAULT: 93,
    TIMELIMIT: 94,
    PREEMPTED: 95,
}
# The user's classes keep the status the trainer returns.
USER_EXIT = {fc.CONFIG: 2, fc.CRASH: 1, fc.DIVERGED: 1}
INFRA_CODES = tuple(sorted(INFRA_EXIT.values()))

# The signal an outside engine sends for a save-and-stop, and the class the stop then has.
SAVE_SIGNALS = {int(signal.SIGUSR1): TIMELIMIT, int(signal.SIGUSR2): PREEMPTED}
SIGNAL_NAMES = {TIMELIMIT: "USR1", PREEMPTED: "USR2"}

_BY_CODE = {code: cls for cls, code in INFRA_EXIT.items()}


def tree_exit(cls: str, code: int) -> int:
    """The status the process tree ends with after an attempt of class ``cls`` whose own status was
    ``code``: the class's status for an infrastructure class, else ``code`` unchanged."""
    return INFRA_EXIT.get(cls, code)


def class_of_exit(code: int | None) -> str | None:
    """The infrastructure class an exit status says, or None (any other status)."""
    return _BY_CODE.get(code) if code is not None else None


def saved_class(code: int | None) -> str | None:
    """``timelimit`` or ``preempted`` when ``code`` is the trainer's status after such a stop, else None.
    (The other infrastructure statuses are the supervisor's, decided from more than a status.)"""
    cls = class_of_exit(code)
    return cls if cls in (TIMELIMIT, PREEMPTED) else None


def signal_class(signum: int | None) -> str | None:
    """The class of a stop asked by ``signum`` (SIGUSR1: timelimit, SIGUSR2: preempted), else None."""
    return SAVE_SIGNALS.get(int(signum)) if signum is not None else None
