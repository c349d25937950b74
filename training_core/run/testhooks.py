"""Failures on demand, for the tests of pippa's failure handling (tests/ops/test_failures_ssh.py and others).

Off unless an environment variable asks; a run never sets them itself.

- ``PIPPA_TEST_OOM_ABOVE_BATCH=N``: the first step raises a real ``torch.OutOfMemoryError`` (with the
  CUDA caching allocator's wording) when the per-device batch is above N, as a GPU too small for it would.
- ``PIPPA_TEST_HANG_RANK=R`` with ``PIPPA_TEST_HANG_AT_STEP=S``: rank R stops calling the collectives
  at the start of step S (it sleeps in ``wander_off``), so the other ranks wait for it inside one;
  ``PIPPA_TEST_HANG_ONCE=PATH`` makes that happen only while PATH does not exist (created when it does),
  so the retry completes.
- ``PIPPA_TEST_PAUSE_AT_STEP=S``: the run waits at the end of step S (before its metrics row) until a
  stop signal arrives (at most 10 minutes), so a test's ``pippa stop`` (or kill) lands in the middle of
  the run however fast the steps are: a stop saves step S + 1 and ends the run there.
  ``PIPPA_TEST_PAUSE_ONCE=PATH`` makes that happen only while PATH does not exist (created when it
  does), so the attempt after a kill runs through; removing PATH while it waits lets it go on (a
  test that changes the host under a run, e.g. fills its disk, at a known step).
- ``PIPPA_TEST_SLOW_RECORD=S``: the metrics writer waits S seconds after each write, as a loaded host
  may between two writes: a reader that could see a failed start's header without its end line does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

OOM_ENV = "PIPPA_TEST_OOM_ABOVE_BATCH"
HANG_RANK_ENV = "PIPPA_TEST_HANG_RANK"
HANG_STEP_ENV = "PIPPA_TEST_HANG_AT_STEP"
HANG_ONCE_ENV = "PIPPA_TEST_HANG_ONCE"
PAUSE_ENV = "PIPPA_TEST_PAUSE_AT_STEP"
PAUSE_ONCE_ENV = "PIPPA_TEST_PAUSE_ONCE"
SLOW_RECORD_ENV = "PIPPA_TEST_SLOW_RECORD"
PAUSE_MAX_S = 600.0


def wanted() -> bool:
    return any(os.environ.get(k) for k in (OOM_ENV, HANG_RANK_ENV, PAUSE_ENV))


def wander_off() -> None:
    """Where the hanging rank sits: never in a collective."""
    while True:
        time.sleep(0.2)


def _first_time(path: str, note: str) -> bool:
    """True the first time (``path`` is then created, saying ``note``); False once it exists."""
    if os.path.exists(path):
        return False
    with open(path, "w") as f:
        f.write(note + "\n")
    return True


def callback(stop_requested: Callable[[], object]) -> Any:
    """The TrainerCallback that carries out what the environment asks; ``stop_requested()`` is true
    once the run's stop signal has come."""
    import torch
    from transformers import TrainerCallback

    oom_above = int(os.environ.get(OOM_ENV) or 0)
    hang_rank = os.environ.get(HANG_RANK_ENV)
    hang_step = int(os.environ.get(HANG_STEP_ENV) or 1)
    once = os.environ.get(HANG_ONCE_ENV)
    pause_at = int(os.environ.get(PAUSE_ENV) or 0)
    pause_once = os.environ.get(PAUSE_ONCE_ENV)

    class FailOnDemand(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            batch = int(args.per_device_train_batch_size)
            if oom_above and batch > oom_above:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
                    f"of which 1.02 GiB is free. (test hook: per-device batch {batch} > {oom_above})"
                )
            rank = int(os.environ.get("RANK", "0"))
            if hang_rank is not None and rank == int(hang_rank) and state.global_step + 1 == hang_step:
                if once and not _first_time(once, f"rank {rank} hung at step {hang_step}"):
                    return
                wander_off()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if pause_at and state.global_step == pause_at:
                if pause_once and not _first_time(pause_once, f"paused at step {pause_at}"):
                    return
                deadline = time.monotonic() + PAUSE_MAX_S
                held = lambda: pause_once is None or os.path.exists(pause_once)  # noqa: E731
                while not stop_requested() and time.monotonic() < deadline and held():
                    time.sleep(0.05)

    return FailOnDemand()
