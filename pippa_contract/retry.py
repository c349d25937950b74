"""What the supervisor does after an attempt of each failure class (pippa_contract.failures).

- ``lost``, ``nccl``, ``stalled``: the infrastructure's fault. Retried without spending ``--retry``,
  up to ``infra_retries`` (``--infra-retries``, default 3) such retries per run.
- ``oom``: retried with half the per-device batch and twice the gradient accumulation (the effective
  batch, and so the learning curve, stay the same), once per halving, down to a batch of 1; without
  spending ``--retry``. ``--on-oom fail`` turns it off (then it is a crash like any other).
- ``gpu-fault``: not retried on this host (a retry would land on the same broken GPU).
- ``config``, ``stopped``: never; ``diverged`` only with ``retry_diverged``.
- ``timelimit``, ``preempted`` (pippa_contract.exitcodes): never here and without spending ``--retry``:
  the engine that asked for the save (SLURM, SkyPilot) restarts the run.
- ``crash``, ``host-oom`` (and ``oom`` with ``--on-oom fail``): retried while ``--retry`` lasts.

Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

from dataclasses import dataclass

from pippa_contract import attempts
from pippa_contract import exitcodes as ec
from pippa_contract import failures as fc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

INFRA_RETRIES = attempts.INFRA_RETRIES  # the default, as the host reads it
ON_OOM = ("halve", "fail")
BATCH_KEY = "train.per_device_train_batch_size"
ACCUM_KEY = "train.gradient_accumulation_steps"


@dataclass(frozen=True)
class Decision:
    """``retry``: start another attempt; ``spends``: ``budget`` (--retry), ``infra``, ``oom`` or None;
    ``why``: one line for the banner and the alert; ``batch``: the new (per-device batch, accumulation)
    of an OOM retry."""

    retry: bool
    spends: str | None
    why: str
    batch: tuple[int, int] | None = None

    def set_args(self) -> list[str]:
        """The ``--set`` arguments an OOM retry adds to the command line."""
        if self.batch is None:
            return []
        b, g = self.batch
        return ["--set", f"{BATCH_KEY}={b}", "--set", f"{ACCUM_KEY}={g}"]


def halve(batch: int, accum: int) -> tuple[int, int] | None:
    """The per-device batch halved and the accumulation doubled; None when the batch is already 1.
    An odd batch goes to its largest divisor below half (9 -> 3, accumulation x3), so batch x
    accumulation, the effective batch, is always exactly the same."""
    if batch <= 1:
        return None
    smaller = next(d for d in range(batch // 2, 0, -1) if batch % d == 0)
    return smaller, accum * (batch // smaller)


def spent(classes: Sequence[str], on_oom: str = "halve") -> tuple[int, int, int]:
    """(budget attempts, infra retries, oom retries) used by the ended attempts of ``classes``."""
    infra = sum(1 for c in classes if c in fc.INFRA)
    oom = sum(1 for c in classes if c == fc.OOM and on_oom == "halve")
    outside = sum(1 for c in classes if c in (ec.TIMELIMIT, ec.PREEMPTED))  # an outside engine's restart
    budget = len(classes) - infra - oom - outside
    return budget, infra, oom


def decide(
    classes: Sequence[str],
    *,
    max_attempts: int,
    infra_retries: int = INFRA_RETRIES,
    retry_diverged: bool = False,
    on_oom: str = "halve",
    batch: tuple[int, int] | None = None,
) -> Decision:
    """After the attempts whose classes are ``classes`` (oldest first, the last one just ended): retry?

    ``max_attempts``: 1 + ``--retry``; ``batch``: the last attempt's (per-device batch, accumulation)
    for an OOM retry (None: unknown, e.g. a ``--cmd`` run: no halving)."""
    cls = classes[-1]
    budget, infra, _ = spent(classes, on_oom)
    left = max_attempts - budget
    if cls == fc.COMPLETED:
        return Decision(False, None, "completed")
    if cls == fc.STOPPED:
        return Decision(False, None, "stopped by the user: not retried")
    if cls == fc.CONFIG:
        return Decision(False, None, "a configuration or usage error (exit 2): not retried")
    if cls in (ec.TIMELIMIT, ec.PREEMPTED):
        return Decision(False, None, f"saved at the {cls} signal: the engine that sent it restarts the run")
    if cls == fc.DIVERGED and not retry_diverged:
        return Decision(False, None, "diverged: not retried (--retry-diverged retries it)")
    if cls == fc.DISK_FULL:
        return Decision(False, None, "the disk is full: not retried (free space, then pippa resume RUN)")
    if cls == fc.GPU_FAULT:
        return Decision(
            False, None, "a GPU fault: not retried on this host (pippa resume RUN --on HOST moves it)"
        )
    if cls in fc.INFRA:
        if infra <= infra_retries:
            return Decision(
                True, "infra", f"infrastructure retry {infra}/{infra_retries} (not counted in --retry)"
            )
        return Decision(False, None, f"{infra_retries} infrastructure retries used: giving up")
    if cls == fc.OOM and on_oom == "halve":
        if batch is None:
            return Decision(False, None, "out of memory and the batch size is unknown: not retried")
        smaller = halve(int(batch[0]), int(batch[1]))
        if smaller is None:
            return Decision(False, None, "out of memory at a per-device batch of 1: not retried")
        return Decision(
            True,
            "oom",
            f"out of memory: per-device batch {batch[0]} -> {smaller[0]}, gradient "
            f"accumulation {batch[1]} -> {smaller[1]} (same effective batch)",
            smaller,
        )
    if left > 0:
        return Decision(True, "budget", f"retry {budget}/{max_attempts - 1}")
    return Decision(False, None, "no attempts left" if max_attempts > 1 else "no retry asked (--retry N)")


def may_restart_lost(doc: object) -> bool | None:
    """Whether a run whose last attempt was lost (its session gone) may start again, by the classes of
    its earlier attempts in attempts.json ``doc`` (a lost attempt spends ``infra_retries``, not
    ``--retry``); None for a record without classes (older runs: the caller counts attempts)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("attempts"), list):
        return None
    attempts = [a for a in doc["attempts"] if isinstance(a, dict)]
    earlier = attempts[:-1]
    if not attempts or any("class" not in a for a in earlier) or "infra_retries" not in doc:
        return None
    classes = [str(a["class"]) for a in earlier] + [fc.LOST]
    return decide(
        classes, max_attempts=int(doc.get("max_attempts") or 1), infra_retries=int(doc["infra_retries"])
    ).retry
