"""SLURM: a run on a cluster is a batch job instead of a tmux session. Its run directory holds the
sbatch script (job.sbatch) and the job id (slurm_job); squeue / scontrol (sacct with accounting) say
its state. The script itself records started / exit_code like cmd.sh does."""

from __future__ import annotations

import os
import re
import time

from pippa_agent.host import (
    AgentError,
    ErrorKind,
    last_line,
    reopen_run_dir,
    run,
    runs_dir,
    text,
    which,
    write_atomic,
    write_sync_marker,
)
from pippa_contract import rundir as rd
from pippa_contract.names import NAME_RE
from pippa_contract.states import SLURM_ACTIVE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_agent.host import Answer
    from pippa_contract.messages import (
        SlurmStopAnswer,
        SlurmStopRequest,
        SlurmSubmitAnswer,
        SlurmSubmitRequest,
    )

_JOB_ID_RE = re.compile(r"^[0-9]+(_[0-9]+)?$")


def slurm_submit(req: SlurmSubmitRequest) -> SlurmSubmitAnswer:
    """Write run.json and job.sbatch into the run directory, ``sbatch`` it, record the job id."""
    marker = req.get("sync_marker")
    if marker is not None:
        write_sync_marker(req["remote_dir"], marker)
    if which("sbatch") is None:
        raise AgentError(ErrorKind.TOOL_MISSING, "sbatch is not installed (is this a SLURM login node?)")
    rid = req["run_id"]
    if not NAME_RE.match(rid):
        raise AgentError(ErrorKind.USAGE, f"invalid run id {rid!r}")
    d = os.path.join(runs_dir(req["remote_dir"]), rid)
    if req.get("resume"):
        reopen_run_dir(d, "slurm", float(req["stamp"]))
        if os.path.lexists(os.path.join(d, rd.SLURM_JOB)):
            os.unlink(os.path.join(d, rd.SLURM_JOB))
    else:
        os.makedirs(d, exist_ok=True)
        write_atomic(os.path.join(d, rd.RUN_JSON), (req["run_json"] + "\n").encode())
    script = os.path.join(d, rd.JOB_SBATCH)
    write_atomic(script, req["script"].encode(), 0o755)
    p = run(["sbatch", "--parsable", "--chdir", d, script], timeout=60)
    if p.returncode != 0:
        raise AgentError(ErrorKind.SLURM, "sbatch failed: " + last_line(p))
    job = text(p).split(";")[0]  # "<id>" or "<id>;<cluster>"
    if not _JOB_ID_RE.match(job):
        raise AgentError(ErrorKind.SLURM, f"sbatch answered {text(p)!r}, not a job id")
    write_atomic(os.path.join(d, rd.SLURM_JOB), (job + "\n").encode())
    return {"job_id": job}


def slurm_states(job_ids: list[str]) -> Answer:
    """job id -> {"state", "reason", "nodes", "exit_code"} (exit_code "N:S" once the job ended):
    one squeue for the jobs it still knows, then scontrol (MinJobAge keeps ended jobs a while), then
    sacct where accounting exists; a job none of them knows is "UNKNOWN"."""
    ids = [j for j in job_ids if _JOB_ID_RE.match(j)]
    out: Answer = {}
    if not ids:
        return out
    p = run(["squeue", "-h", "-u", str(os.getuid()), "-t", "all", "-o", "%i|%T|%r|%N"], timeout=30)
    for line in text(p).splitlines() if p.returncode == 0 else []:
        parts = line.split("|")
        if len(parts) == 4 and parts[0] in ids:
            out[parts[0]] = {"state": parts[1], "reason": parts[2], "nodes": parts[3], "exit_code": None}
    for job in ids:
        if job in out and out[job]["state"] in SLURM_ACTIVE:
            continue
        fields = scontrol_job(job)
        if fields:
            out[job] = {
                "state": fields.get("JobState", "UNKNOWN"),
                "reason": fields.get("Reason", ""),
                "nodes": fields.get("NodeList", ""),
                "exit_code": fields.get("ExitCode"),
            }
        elif job not in out:
            out[job] = sacct_job(job)
    return out


def scontrol_job(job: str) -> Answer:
    p = run(["scontrol", "show", "job", "-o", job], timeout=30)
    if p.returncode != 0:
        return {}
    fields = {}
    for word in text(p).split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def sacct_job(job: str) -> Answer:
    p = run(["sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode,NodeList"], timeout=30)
    rows = [r.split("|") for r in text(p).splitlines() if r.strip()] if p.returncode == 0 else []
    if not rows or len(rows[0]) < 3:
        return {"state": "UNKNOWN", "reason": "", "nodes": "", "exit_code": None}
    state = rows[0][0].split()[0]  # "CANCELLED by 0" -> "CANCELLED"
    return {"state": state, "reason": "", "nodes": rows[0][2], "exit_code": rows[0][1]}


def slurm_stop(req: SlurmStopRequest) -> SlurmStopAnswer:
    """Mark the run stop_requested, SIGINT the job's steps (the trainer saves a checkpoint), wait for
    the run's exit code up to the grace period, then cancel the job (a pending job at once)."""
    rid, job = req["run_id"], req["job_id"]
    if not NAME_RE.match(rid) or not _JOB_ID_RE.match(job):
        raise AgentError(ErrorKind.USAGE, f"invalid run {rid!r} or job id {job!r}")
    d = os.path.join(runs_dir(req["remote_dir"]), rid)
    write_atomic(os.path.join(d, rd.STOP_REQUESTED), f"{int(req['stamp'])}\n".encode())
    state = slurm_states([job]).get(job, {}).get("state")
    if state == "RUNNING":
        run(["scancel", "--signal=INT", job], timeout=30)
        deadline = time.monotonic() + float(req["grace_s"])
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(d, rd.EXIT_CODE)):
                break
            if slurm_states([job]).get(job, {}).get("state") not in SLURM_ACTIVE:
                break
            time.sleep(0.5)
    cancelled = False
    if slurm_states([job]).get(job, {}).get("state") in SLURM_ACTIVE:
        cancelled = run(["scancel", job], timeout=30).returncode == 0
    return {"was": state, "cancelled": cancelled}
