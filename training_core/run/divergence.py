"""Divergence: a loss or reward that becomes NaN or infinite ends the run instead of training on garbage.

The metrics callback checks each step line once it is written (``check``); the runner ends the run with
the end status ``diverged`` naming the step and the key (docs/CONTRACTS.md), saving no checkpoint (it
would hold the broken weights). The host supervisor (pippa_agent.supervise) does not retry such a
run unless asked: from the same checkpoint it would diverge again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from training_core.errors import TrainingError

# The keys a diverged run shows first: the objective and what it is trained on. Other keys (a
# reward function's own mean, TRL's nanmean of a function that scored nothing) may be NaN legitimately.
WATCHED = ("loss/total", "reward/mean")


class Diverged(TrainingError):
    """A watched metric became NaN or infinite; ``str()`` is the run's end error line."""

    def __init__(self, step: int, key: str, value: float) -> None:
        super().__init__(f"diverged at step {step}: {key} is {value}")
        self.step, self.key = step, key


def non_finite(metrics: Mapping[str, object]) -> str | None:
    """The first watched key whose value is NaN or infinite (pure)."""
    for key in WATCHED:
        value = metrics.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            return key
    return None


def check(step: int, metrics: Mapping[str, object]) -> None:
    """Raise Diverged when a watched metric of this step is not finite."""
    key = non_finite(metrics)
    if key is not None:
        raise Diverged(step, key, float(str(metrics[key])))
