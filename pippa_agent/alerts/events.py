"""The events an alert tells: one about a run, from its directory (docs/CONTRACTS.md), or one about
the host itself (GPUs idle or busy again, low disk)."""

from __future__ import annotations

import json
import os
import re
import time

from pippa_agent.alerts.files import first_line, load_config, read_json, read_text, tail_lines
from pippa_contract import rundir as rd
from pippa_contract import states
from pippa_contract.advice import after_disk_full, after_failed_start, started_training
from pippa_contract.alerts import cost_so_far, run_gpus
from pippa_contract.failures import DISK_FULL, label
from pippa_contract.metrics import header_max_steps
from pippa_contract.records import read_record
from pippa_contract.runfacts import reason_line

# told by pippa_agent.supervise
SUPERVISOR_STATES = ("retrying", "lost", "stalled", "gave_up", "diverged", "budget")
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def run_event(run_dir: str, state: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """Everything a message says about one run, from its directory (docs/CONTRACTS.md) and config.json.

    ``state`` defaults to what the run's files say (finished on exit 0, else failed); issue-specific
    states (stalled, retried, ...) are passed by their caller with their own reason line."""
    cfg = load_config()
    run_dir = os.path.abspath(os.path.expanduser(run_dir))
    meta = read_json(os.path.join(run_dir, rd.RUN_JSON))
    meta = meta if isinstance(meta, dict) else {}
    run_id = os.path.basename(run_dir.rstrip("/"))
    exit_text = read_text(os.path.join(run_dir, rd.EXIT_CODE), 16)
    if state is None:
        if exit_text is None:
            state = states.RUNNING
        elif read_text(os.path.join(run_dir, rd.STOP_REQUESTED), 32) is not None:
            state = states.STOPPED
        else:
            state = states.FINISHED if exit_text == "0" else states.FAILED
    step = end = None
    any_step = False
    for line in tail_lines(os.path.join(run_dir, rd.METRICS)):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "step":
            step, any_step = rec.get("step"), True
        elif isinstance(rec, dict) and rec.get("type") == "end":
            end = rec
    try:
        first = json.loads(first_line(os.path.join(run_dir, rd.METRICS)) or "null")
    except ValueError:
        first = None
    header: dict[str, Any] = first if isinstance(first, dict) and first.get("type") == "header" else {}
    total = header_max_steps(header)  # the one reader of the header's plan (config.config.train)
    total = total if total is not None and total > 0 else None
    if isinstance(end, dict) and isinstance(end.get("step"), int):
        step = end["step"]
    doc = read_record(os.path.join(run_dir, rd.ATTEMPTS_JSON))
    doc = doc if isinstance(doc, dict) else {}
    attempts = [a for a in doc.get("attempts") or [] if isinstance(a, dict)]
    said: dict[str, Any] = doc["event"] if isinstance(doc.get("event"), dict) else {}
    if reason is None and state in SUPERVISOR_STATES and said.get("message"):
        reason = str(said["message"])  # the supervisor's own line: attempt, class, reason, what it does next
    if reason is None and state == states.FAILED and attempts and attempts[-1].get("class"):
        last = attempts[-1]  # stalled (no new metrics line for 15m), crash: KeyError 'answer' at ...
        reason = label(str(last["class"]), last.get("reason")) + (
            f" after {len(attempts)} attempts" if len(attempts) > 1 else ""
        )
    if reason is None and state == states.FAILED:
        reason = (end or {}).get("error") or reason_line(tail_lines(os.path.join(run_dir, rd.OUTPUT_LOG)))
    started = read_text(os.path.join(run_dir, rd.STARTED), 32)
    t0 = float(started) if started and re.match(r"^\d+(\.\d+)?$", started) else meta.get("started")
    t1 = None
    try:
        t1 = os.stat(os.path.join(run_dir, rd.EXIT_CODE)).st_mtime if exit_text is not None else time.time()
    except OSError:
        t1 = time.time()
    elapsed = max(0.0, t1 - float(t0)) if isinstance(t0, (int, float)) else None
    past = meta.get("past_s")  # the stretches before its resumes and recoveries count too
    if elapsed is not None and isinstance(past, (int, float)):
        elapsed += float(past)
    command = str(meta.get("command") or "")
    per_host, per_gpu = cfg.get("cost_per_hour"), cfg.get("cost_per_gpu_hour")
    wandb = header.get("wandb")
    wandb = wandb if isinstance(wandb, dict) else {}
    host = str(meta.get("host") or cfg.get("host") or "?")
    session, short = str(meta.get("session") or ""), run_id.rsplit("-", 1)[-1]
    label_ = meta.get("recipe") or "cmd"
    return {
        "state": state,
        "host": host,
        "run_id": run_id,
        # the run as its user knows it: the session (--name), the recipe (or cmd), the short id
        "name": f"{session} ({label_}, {short})" if session else None,
        "attempt": f"{len(attempts)}/{doc.get('max_attempts') or len(attempts)}" if attempts else None,
        "recipe": meta.get("recipe") or (command[:80] if command else None),
        "step": step,
        "total_steps": total,
        "reason": reason,
        "elapsed_s": elapsed,
        "cost": cost_so_far(elapsed, per_host, per_gpu, run_gpus(command), cfg.get("gpus")),
        "currency": cfg.get("currency"),  # config.json from `pippa up` ("$" where it has none)
        "wandb": wandb.get("url"),
        "look": _look(run_id, host, state, meta, end, any_step, reason, attempts[-1] if attempts else {}),
        "time": time.time(),
    }


def ended_disk_full(run_dir: str) -> bool:
    """Whether the run's last attempt ended ``disk-full``: its own message names the path and the free
    space, so a full disk sends that one alert, not a ``disk low`` one beside it."""
    doc = read_record(os.path.join(os.path.expanduser(run_dir), rd.ATTEMPTS_JSON))
    attempts = doc.get("attempts") if isinstance(doc, dict) else None
    last = attempts[-1] if isinstance(attempts, list) and attempts else None
    return isinstance(last, dict) and last.get("class") == DISK_FULL


def _look(
    run_id: str,
    host: str,
    state: str,
    meta: dict[str, Any],
    end: Any,
    steps: bool,
    reason: Any,
    last: dict[str, Any],
) -> str:
    """``pippa logs RUN --host H``; for a run ended by a full disk, what to free and the resume; for a
    recipe run that failed before its first step, what to fix and the command that runs it again
    (pippa_contract.advice: a resume would meet the same cause)."""
    if state == states.FAILED and last.get("class") == DISK_FULL:
        said = last.get("reason")
        return after_disk_full(str(said) if said else None, run_id, host)
    recipe = meta.get("recipe")
    if state == states.FAILED and isinstance(recipe, str) and not started_training(end, steps):
        command = str(meta.get("command") or "")
        return after_failed_start(str(reason) if reason else None, recipe, command, host)
    return f"pippa logs {run_id} --host {host}"


def host_event(state: str, subject: str, reason: str, elapsed_s: float | None = None) -> dict[str, Any]:
    """An event about the host itself (GPUs idle or busy again, low disk)."""
    cfg = load_config()
    host = str(cfg.get("host") or "?")
    gpus = cfg.get("gpus")
    cost = None
    if elapsed_s is not None and state == "idle":
        cost = cost_so_far(elapsed_s, cfg.get("cost_per_hour"), cfg.get("cost_per_gpu_hour"), None, gpus)
    return {
        "state": state,
        "host": host,
        "subject": subject,
        "reason": reason,
        "elapsed_s": elapsed_s,
        "cost": cost,
        "currency": cfg.get("currency"),
        "look": "pippa hosts",
        "time": time.time(),
    }
