"""Runs and job control on a tmux host: the runs' facts, launching a session, stopping one, a run's
checkpoints, removing run directories."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import time

from pippa_agent.host import (
    LIST_FORMAT,
    AgentError,
    ErrorKind,
    reopen_run_dir,
    runs_dir,
    text,
    tmux,
    which,
    write_sync_marker,
)
from pippa_agent.pins import record_program
from pippa_contract import diskspace as disk
from pippa_contract import rundir as rd
from pippa_contract.checkpoint_check import pick
from pippa_contract.names import NAME_RE, SESSION_RE
from pippa_contract.runfacts import redact_run, run_facts
from pippa_contract.secretprints import host_redactor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import (
        LaunchAnswer,
        LaunchRequest,
        ListRunsAnswer,
        ListRunsRequest,
        RemoveRunsAnswer,
        RemoveRunsRequest,
        RunCheckpointsAnswer,
        RunRequest,
        StopAnswer,
        StopRequest,
    )


def list_runs(req: ListRunsRequest) -> ListRunsAnswer:
    """Every run directory's files and the tmux sessions, in one answer; the laptop derives states."""
    sessions = tmux("list-sessions", "-F", LIST_FORMAT)
    listing = sessions.stdout.decode(errors="replace")
    out: ListRunsAnswer = {"now": time.time(), "sessions": listing, "runs": []}
    base = runs_dir(req["remote_dir"])
    try:
        names = sorted(n for n in os.listdir(base) if NAME_RE.match(n))
    except OSError:
        return out
    secrets = host_redactor()  # a job may print a token: reason lines leave here without it
    for name in names[-int(req.get("limit", 50)) :]:
        run = run_facts(os.path.join(base, name), bool(req.get("summary")))
        if run is not None:
            out["runs"].append(redact_run(run, secrets))
    jobs = [r["slurm"]["job_id"] for r in out["runs"] if "slurm" in r and r["exit_code"] is None]
    if jobs and which("squeue"):
        from pippa_agent.slurm import slurm_states  # only where SLURM runs

        states = slurm_states(jobs)
        for r in out["runs"]:
            if "slurm" in r:
                r["slurm"].update(states.get(r["slurm"]["job_id"], {}))
    return out


def launch(req: LaunchRequest) -> LaunchAnswer:
    """Refuse or replace the session, write each run's run.json and cmd.sh, start the session."""
    marker = req.get("sync_marker")
    if marker is not None:
        write_sync_marker(req["remote_dir"], marker)
    if which("tmux") is None:
        raise AgentError(ErrorKind.TOOL_MISSING, "tmux is not installed")
    session = req["session"]
    if not SESSION_RE.match(session):
        raise AgentError(ErrorKind.USAGE, f"invalid session name {session!r}")
    base = runs_dir(req["remote_dir"])
    os.makedirs(base, exist_ok=True)
    free = disk.free_bytes(base)
    if free is not None and free < disk.FULL_BELOW:  # no room for the run's record and reserve: no start
        raise AgentError(
            ErrorKind.REMOTE_FAILED,
            f"not started: the disk of {base} is full ({disk.free_text(base)}); free space first "
            "(ended runs: pippa prune --older-than 7d, pippa rm RUN)",
        )
    # One launch at a time on this host: claiming the session name (has-session, then new-session) and
    # making the run directories are one step, so two starts of one name never both get past the check.
    lock = os.open(os.path.join(base, rd.LAUNCH_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _launch(req, session, base)
    finally:
        os.close(lock)


def _launch(req: LaunchRequest, session: str, base: str) -> LaunchAnswer:
    old = None
    if tmux("has-session", "-t", "=" + session).returncode == 0:
        if not req.get("replace"):
            raise AgentError(ErrorKind.SESSION_EXISTS, f"session {session} exists")
        mark_replaced(base, session, int(req["stamp"]))
        # Renamed aside and killed only once the new one exists: killing it first could end the
        # server, and a new server numbers sessions from $0 again (a reused identity).
        old = f"{session}-replaced-{int(req['stamp'])}"
        tmux("rename-session", "-t", "=" + session, old)
    made: list[str] = []  # the run directories this start made: removed again when it fails
    for r in req["runs"]:
        if not NAME_RE.match(r["run_id"]):
            raise AgentError(ErrorKind.USAGE, f"invalid run id {r['run_id']!r}")
        d = os.path.join(base, r["run_id"])
        if r.get("resume"):
            reopen_run_dir(d, session, float(req["stamp"]))
        else:
            if not os.path.isdir(d):
                made.append(d)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, rd.RUN_JSON), "w") as f:
                f.write(r["run_json"] + "\n")
        with open(os.path.join(d, rd.CMD_SH), "w") as f:
            f.write(r["cmd_sh"])
        if req.get("program"):  # the host program its cmd.sh runs (supervisor, alert hook)
            record_program(d, req["program"])
    p = tmux(*req["tmux_argv"][1:])
    if p.returncode != 0 and b"server exited unexpectedly" in p.stderr:
        # the tmux server was exiting as we connected (its last session had just ended): a new one
        # starts on the next try
        time.sleep(0.2)
        p = tmux(*req["tmux_argv"][1:])
    if old is not None:  # a failed start still ends the replaced session, as asked
        tmux("kill-session", "-t", "=" + old)
    if p.returncode != 0:
        for d in made:  # a start that did not start leaves nothing behind
            shutil.rmtree(d, ignore_errors=True)
        raise AgentError(
            ErrorKind.TMUX, "tmux new-session failed: " + p.stderr.decode(errors="replace").strip()
        )
    ident = text(p)
    for r in req["runs"]:
        with open(os.path.join(base, r["run_id"], rd.TMUX_SESSION), "w") as f:
            f.write(ident + "\n")
    return {"identity": ident}


def mark_replaced(base: str, session: str, stamp: int) -> None:
    """Record ``stop_requested`` on the unfinished runs of ``session`` before it is replaced."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        d = os.path.join(base, name)
        if os.path.exists(os.path.join(d, rd.EXIT_CODE)):
            continue
        try:
            with open(os.path.join(d, rd.RUN_JSON), "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("session") == session:
            with open(os.path.join(d, rd.STOP_REQUESTED), "w") as f:
                f.write(f"{stamp}\n")


def stop(req: StopRequest) -> StopAnswer:
    """Mark the runs stop_requested, Ctrl-C the session, wait for the exit code up to the grace
    period, then kill the session (ends a sweep's remaining runs; kills a job that ignored Ctrl-C).
    No grace (a stale copy of a run that moved on, pippa_ops.runs.moving.stale): no Ctrl-C, whose save would
    finish a step and log it; the hang-up ends the job at once."""
    base = runs_dir(req["remote_dir"])
    session = req["session"]
    if not SESSION_RE.match(session):
        raise AgentError(ErrorKind.USAGE, f"invalid session name {session!r}")
    for rid in req["run_ids"]:
        if NAME_RE.match(rid):
            with open(os.path.join(base, rid, rd.STOP_REQUESTED), "w") as f:
                f.write(f"{int(req['stamp'])}\n")
    if float(req["grace_s"]) > 0:
        tmux("send-keys", "-t", f"={session}:", "C-c")
    watch = os.path.join(base, req["watch"], rd.EXIT_CODE)
    deadline = time.monotonic() + float(req["grace_s"])
    while time.monotonic() < deadline:
        if os.path.exists(watch) or tmux("has-session", "-t", "=" + session).returncode != 0:
            break
        time.sleep(0.25)
    killed = tmux("kill-session", "-t", "=" + session).returncode == 0
    return {"killed_session": killed}


def run_checkpoints(req: RunRequest) -> RunCheckpointsAnswer:
    """The checkpoint directories of a run (``checkpoint-N``), oldest first, the torn ones at its end
    passed over (pippa_contract.checkpoint_check: sizes against the manifest, not hashes)."""
    d = os.path.join(runs_dir(req["remote_dir"]), req["run_id"])
    if not NAME_RE.match(req["run_id"]) or os.path.islink(d):
        raise AgentError(ErrorKind.USAGE, "invalid run id " + repr(req["run_id"]))
    ckpt_dir = os.path.join(d, rd.CHECKPOINTS)
    _, skipped = pick(ckpt_dir, hashes=False)  # a cut file, told by its size; set aside as <name>.torn
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        names = []
    return {"checkpoints": rd.checkpoint_names(names), "skipped": skipped}


def dir_size(path: str) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def remove_runs(req: RemoveRunsRequest) -> RemoveRunsAnswer:
    """Delete run directories (``dry_run``: only measure them). The laptop picks ended runs; a run
    without an exit code whose tmux session is alive is refused here too."""
    import shutil

    base = runs_dir(req["remote_dir"])
    alive = set(text(tmux("list-sessions", "-F", "#{session_name}")).splitlines())
    out: RemoveRunsAnswer = {"removed": [], "refused": {}, "bytes": 0}
    for run_id in req["run_ids"]:
        d = os.path.join(base, str(run_id))
        if not NAME_RE.match(str(run_id)) or os.path.islink(d) or not os.path.isdir(d):
            out["refused"][run_id] = "no such run directory"
            continue
        facts = run_facts(d) or {}
        session = str((facts.get("meta") or {}).get("session", ""))
        if facts.get("exit_code") is None and session in alive:
            out["refused"][run_id] = "its session " + session + " is alive"
            continue
        out["bytes"] += dir_size(d)
        if not req.get("dry_run"):
            shutil.rmtree(d)
        out["removed"].append(run_id)
    return out
