"""``pippa run`` reports the start, not the launch: after starting a run it watches until the
trainer's first line after start-up (its metrics header: torch and transformers imported, the model
and data loaded), bounded, so a run that dies in start-up (a CPU-only torch on a GPU host, a model
that cannot be downloaded) is reported as dead, with the line ``ps`` shows, and a non-zero exit.

A ``--cmd`` run has no first line pippa knows of: it is watched a few seconds for an early exit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from pippa_ops.errors import BadSetting
from pippa_ops.runs.records.listing import RunRecord, list_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport

DEFAULT_WAIT_S = 20.0  # a recipe's start-up: imports (~5-10 s on a real host), the model's load
CMD_WAIT_S = 3.0  # a --cmd run: long enough for an import error or a missing file to end it
WAIT_ENV = "PIPPA_RUN_WAIT_S"  # the default of `pippa run --wait`
POLL_S = 0.25  # one small agent request on a kept process: a start is seen within this of happening

# seconds watched, the run's record (None: not listed yet)
Progress = Callable[[float, RunRecord | None], None]


def wait_seconds(wait: float | None, recipe: bool) -> float:
    """The watch's bound: ``--wait``, else ``$PIPPA_RUN_WAIT_S``, else the default for a recipe or a --cmd."""
    if wait is not None:
        return max(0.0, wait)
    raw = os.environ.get(WAIT_ENV)
    try:
        return max(0.0, float(raw)) if raw else (DEFAULT_WAIT_S if recipe else CMD_WAIT_S)
    except ValueError:
        raise BadSetting(f"{WAIT_ENV}={raw!r}: give seconds, e.g. 20") from None


@dataclass(frozen=True)
class StartWatch:
    """How a watched start went: ``ended`` (the run is over, ``record`` says how), ``started`` (the
    trainer wrote its first line), or neither (the bound ran out while it was still starting)."""

    record: RunRecord | None
    started: bool
    waited_s: float

    @property
    def ended(self) -> bool:
        return self.record is not None and not self.record.active


def watch_start(
    transport: Transport,
    remote_dir: str,
    run_id: str,
    wait_s: float,
    *,
    until_first_line: bool,
    progress: Progress | None = None,
    poll_s: float = POLL_S,
) -> StartWatch:
    """Poll the run's record until it ends, or (``until_first_line``) its trainer has written its first
    line, or ``wait_s`` seconds have passed; ``progress`` is told after each poll."""
    t0 = time.monotonic()
    deadline = t0 + wait_s
    rec = None
    with agent_client.Session(transport) as agent:
        while True:
            runs = list_runs(transport, remote_dir, agent=agent)
            rec = next((r for r in runs.runs if r.run_id == run_id), None)
            waited = time.monotonic() - t0
            if rec is not None and not rec.active:
                return StartWatch(rec, False, waited)
            if until_first_line and rec is not None and rec.recording:
                return StartWatch(rec, True, waited)
            if time.monotonic() >= deadline:
                return StartWatch(rec, False, waited)
            if progress is not None:
                progress(waited, rec)
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
