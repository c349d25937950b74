"""The trainer's alarm watch: after each step and eval record it runs ``pippa_contract.alarms.raised``
over the run so far and, when an alarm is new, rewrites ``alarms.json`` in the run directory (the
record ``ps``, the dashboard and the host's alert program read) and prints one line to the log.

A new alarm is also handed to the host's alerts (``alerts alarms``, pippa_agent.alerts.alarms), which
tell it once. An alarm, once raised, stays (with the step where it began); a resume starts from the
records the resumed metrics file keeps. Long runs re-check less often (every ``len(steps) // CHECKS``
records), so the watch costs the same few hundred checks whatever the run's length.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pippa_contract import alarms
from training_core.config import RunConfig

CHECKS = 200  # at most about this many full checks per run length (then every len/CHECKS records)


class AlarmWatch:
    def __init__(
        self, run_dir: Path, cfg: RunConfig, sampled: Any = None, keep_from: Path | None = None
    ) -> None:
        """``sampled(step, now)``: the sampled step to read for an alarm that began at ``step`` while the
        run is at ``now`` (``training_core.run.samples.sampled_step``), or None; ``keep_from``: a resumed
        run's metrics file, whose kept records the watch starts from."""
        self.path = run_dir / alarms.ALARMS_JSON
        # the thresholds, and the length cap (a tiny one is the answer format: pippa_contract.alarms)
        self.settings = {**dataclasses.asdict(cfg.alarms), "length_cap": cfg.train.max_completion_length}
        self.sampled = sampled
        self.steps: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.raised: list[dict[str, Any]] = alarms.read_alarms(str(self.path)) if keep_from else []
        if keep_from is not None and keep_from.is_file():
            from pippa_contract.metrics import MetricsReader

            watch = self

            class Kept(MetricsReader):
                def on_header(self, rec: dict[str, Any], keep: int) -> None:
                    watch.steps = [r for r in watch.steps if r["step"] <= keep]
                    watch.evals = [r for r in watch.evals if r["step"] <= keep]

                def on_step(self, step: int, rec: dict[str, Any]) -> None:
                    watch.steps.append(rec)

                def on_eval(self, step: int, rec: dict[str, Any]) -> None:
                    watch.evals.append(rec)

            Kept().read_file(str(keep_from))
            last = self.steps[-1]["step"] if self.steps else 0
            kept = [a for a in self.raised if int(a.get("since", 0)) <= last]
            if kept != self.raised:  # the resume redoes the steps where those began
                self.raised = kept
                alarms.write_alarms(str(self.path), kept)
        self._since_check = 0

    def __call__(self, record: dict[str, Any]) -> None:
        (self.steps if record.get("type") == "step" else self.evals).append(record)
        self._since_check += 1
        if self._since_check < max(1, len(self.steps) // CHECKS) and record.get("type") == "step":
            return
        self._since_check = 0
        self.check()

    def check(self) -> list[dict[str, Any]]:
        """The alarms newly raised by the records so far (written and printed)."""
        known = {a["kind"] for a in self.raised}
        new = [a for a in alarms.raised(self.steps, self.evals, self.settings) if a["kind"] not in known]
        if not new:
            return []
        for a in new:
            now = int(self.steps[-1]["step"]) if self.steps else int(a["since"])
            step = self.sampled(a["since"], now) if self.sampled else None
            a["samples_step"] = step
            print(
                f"alarm: {a['kind'].replace('_', ' ')}: {a['message']}"
                + (f" (samples: step {step})" if step is not None else ""),
                flush=True,
            )
        self.raised += new
        alarms.write_alarms(str(self.path), self.raised)
        tell_host(self.path.parent)
        return new


def tell_host(run_dir: Path) -> None:
    """Have the host's alerts tell the new alarms, once each, in the background (a slow or failing
    service never slows the run): through the run's own host program (``$RUN_DIR/agent.pyz``, what
    cmd.sh tells the run's end with), where `pippa up` set alerts up; otherwise nothing."""
    import contextlib
    import os
    import shutil
    import subprocess
    import sys

    from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR, RUN_PROGRAM

    program = run_dir / RUN_PROGRAM
    if not program.is_file() or not Path(os.path.expanduser(f"{ALERTS_DIR}/{ALERTS_CONFIG}")).is_file():
        return
    argv = [
        shutil.which("python3") or sys.executable,
        "-S",
        "-I",
        str(program),
        "alerts",
        "alarms",
        "--run-dir",
        str(run_dir),
        "--detach",
    ]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # --detach: it returns once forked
        subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
