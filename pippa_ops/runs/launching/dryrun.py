"""``pippa run ... --dry-run``: what a run would be, built by the same code a launch uses, without a host.

The jobs come from ``plan_jobs`` (the names, recipes and ``--set`` values checked as for a launch), the
script from the host's scheduler (``Scheduler.scripts``: the bytes ``submit`` writes as ``cmd.sh`` or
``job.sbatch``), every setting of a recipe and where it came from from the trainer
(``python -m training_core.train RECIPE --explain``), and the host checks a launch makes from the
scheduler (``Scheduler.checks``). Nothing connects to the host: no SSH, no sync, no file. The run id is
this dry run's own; a launch draws a new one (the only bytes that differ).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pippa_ops.errors import BadSetting
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.repo import repo_root
from pippa_ops.runs.launching.launch import plan_jobs
from pippa_ops.runs.launching.restart import RestartFlags
from pippa_ops.runs.launching.schedulers import scheduler_for


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    recipe: str | None
    file: str  # cmd.sh or job.sbatch
    script: str  # its bytes, as a launch writes them
    command: str  # the job's line (run.json's "command"; a supervised cmd.sh runs it through the supervisor)
    settings: list[dict[str, Any]]  # [{"key", "value", "source"}] of a recipe; [] for --cmd
    settings_note: str | None = None  # why a recipe's settings could not be listed here


@dataclass(frozen=True)
class DryRun:
    host: str
    scheduler: str
    remote_dir: str
    runs: list[PlannedRun]
    checks: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "scheduler": self.scheduler,
            "remote_dir": self.remote_dir,
            "runs": [vars(r) for r in self.runs],
            "checks": self.checks,
        }


def recipe_settings(recipe: str, sets: Sequence[str]) -> tuple[list[dict[str, Any]], str | None]:
    """Every setting of ``recipe`` with ``sets``, its value and where it came from (the trainer's
    ``--explain`` from this checkout: no torch, the default CPU platform); or none and why not (a
    checkout whose trainer cannot say). A bad setting is refused as a launch refuses it."""
    argv = [sys.executable, "-m", "training_core.train", recipe, "--explain"]
    for item in sets:
        argv += ["--set", item]
    try:
        p = subprocess.run(argv, cwd=repo_root(), capture_output=True, text=True, timeout=120)
        last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        if p.returncode == 2 and last.startswith("error: "):
            raise BadSetting(f"recipe {recipe}: {last.removeprefix('error: ')}")
        if p.returncode == 0:
            return [r for r in json.loads(p.stdout) if isinstance(r, dict)], None
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        last = str(e)
    return [], f"this checkout's trainer could not list them ({last[:200]})"


def dry_run(
    spec: HostSpec,
    *,
    recipes: Sequence[str] = (),
    command: str | None = None,
    sets: Sequence[str] = (),
    nodes: int | None = None,
    restart: RestartFlags | None = None,
) -> DryRun:
    """The runs a launch with these arguments would start on ``spec``'s host, and what it would check."""
    jobs = plan_jobs(spec, spec.remote_dir, recipes, command, sets, time.time())
    scheduler = scheduler_for(spec)
    scripts = scheduler.scripts(spec, jobs, restart, nodes)
    runs = []
    for job, script in zip(jobs, scripts, strict=True):
        settings, note = recipe_settings(job.recipe, sets) if job.recipe else ([], None)
        runs.append(
            PlannedRun(job.run_id, job.recipe, scheduler.artifact, script, job.command, settings, note)
        )
    checks = scheduler.checks(spec, any(job.recipe for job in jobs))
    return DryRun(spec.name, scheduler.name, spec.remote_dir, runs, checks)
