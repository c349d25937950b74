"""Pure builders for what a launch writes on the host: run ids, ``--set`` items, cmd.sh, the session.

Everything here is a string built from validated names and quoted values, unit-tested without a host.
The wrapper (cmd.sh) is where the run's guarantees live:
- secrets come from the 0600 file, sourced inside the job's subshell; they never appear in cmd.sh,
  argv, tmux send-keys text or run.json; PIPPA_NOTIFY and PIPPA_HEARTBEAT are unset again, since only
  the alerts delivery and the watcher read them (docs/CONTRACTS.md), so even a job that prints its
  environment cannot log them;
- stdout+stderr go to ``output.log`` and to the pane (``tee -a -i``: the tee survives Ctrl-C so a
  trainer that catches SIGINT can still log while it saves);
- the wrapper traps SIGINT, so after an interrupt it still records ``exit_code`` (tmp + rename);
- a queued run of a sweep whose ``stop_requested`` exists exits without starting.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from pippa_contract import rundir as rd
from pippa_contract.alerts import TARGET
from pippa_contract.hostdirs import RUN_PROGRAM
from pippa_contract.rundir import RunDir
from pippa_contract.secrets import HEARTBEAT, SECRETS_PATH
from pippa_ops.alerts.commands import run_end_line
from pippa_ops.errors import BadSetting
from pippa_ops.runs.launching.templates import render
from pippa_ops.transport.shell import export_line, sh_path, validate_name

SET_KEY_RE = re.compile(r"^[a-z_][a-z0-9_.]*$")
DEFAULT_SESSION = "training"
DEFAULT_GAP_S = 10.0


def parse_sets(items: Sequence[str]) -> list[tuple[str, str]]:
    """``key=value`` items: keys ``^[a-z_][a-z0-9_.]*$``, values anything (quoted later)."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadSetting(f"bad --set {item!r}: use key=value (e.g. train.max_steps=10)")
        if not SET_KEY_RE.fullmatch(key):
            raise BadSetting(f"bad --set key {key!r}: use lowercase letters, digits, '_' and '.'")
        out.append((key, value))
    return out


@dataclass(frozen=True)
class Job:
    """One run of a launch: its id, what it runs, and the shell line (no secrets) that runs it."""

    run_id: str
    recipe: str | None
    command: str  # the job's shell line, as written into cmd.sh and run.json
    argv: tuple[str, ...] | None  # the argument list when pippa built it (recipe runs)


def python_words(python: str | None, remote_dir: str) -> list[str]:
    """How the host runs Python: the host's ``python`` setting (may be several words) or the venv."""
    if python:
        words = shlex.split(python)
        return [sh_path(words[0]), *(shlex.quote(w) for w in words[1:])]
    return [sh_path(remote_dir.rstrip("/") + "/.venv/bin/python")]


def recipe_job(
    run_id: str, recipe: str, python: str | None, remote_dir: str, sets: Sequence[tuple[str, str]]
) -> Job:
    """``<python> -m training_core.launch RECIPE --run-dir <abs run dir> [--set k=v ...]``: the launcher
    runs the trainer itself for one process, ``accelerate launch`` for a recipe's ``[launch]`` table."""
    validate_name("recipe", recipe)
    argv = ["-m", "training_core.launch", recipe, "--run-dir"]
    tail: list[str] = []
    for key, value in sets:
        tail += ["--set", f"{key}={value}"]
    run_dir = sh_path(RunDir(remote_dir, run_id).path)
    line = " ".join([*python_words(python, remote_dir), *(shlex.quote(a) for a in argv), run_dir])
    if tail:
        line += " " + shlex.join(tail)
    shown = ["python", *argv, f"{rd.RUNS}/{run_id}", *tail]
    return Job(run_id=run_id, recipe=recipe, command=line, argv=tuple(shown))


def resume_job(run_id: str, recipe: str, command: str) -> Job:
    """The recorded trainer line of a recipe run, with ``--resume``: it continues from the run
    directory's newest checkpoint into the same metrics file (training_core.run.lifecycle)."""
    return Job(run_id=run_id, recipe=recipe, command=f"{command} --resume", argv=None)


def cmd_job(run_id: str, command: str) -> Job:
    if not command.strip():
        raise BadSetting("--cmd needs a command")
    return Job(run_id=run_id, recipe=None, command=command, argv=None)


def source_secrets_line() -> str:
    """The job's secrets: every variable of the 0600 file exported, except the alerts target and the
    heartbeat URL (the watcher's alone)."""
    path = sh_path(SECRETS_PATH)
    return f"if [ -f {path} ]; then set -a; . {path}; set +a; unset {TARGET} {HEARTBEAT}; fi"


def supervisor_line() -> str:
    """The job line of a run with a restart policy: the host supervisor (``pippa_agent.supervise``, in
    the host program the run directory links at launch) runs the recorded command, and retries it."""
    return f'    python3 -S -I "$RUN_DIR/{RUN_PROGRAM}" supervise "$RUN_DIR"'


def render_cmd_sh(job: Job, remote_dir: str, env: dict[str, str], *, supervised: bool = False) -> str:
    """The wrapper the session runs for one job (see the module docstring for its guarantees)."""
    return render(
        rd.CMD_SH,
        run_id=job.run_id,
        run_id_word=shlex.quote(job.run_id),
        secrets_path=SECRETS_PATH,
        run_dir=sh_path(RunDir(remote_dir, job.run_id).path),
        remote_dir=sh_path(remote_dir),
        export_line=export_line(env),
        source_secrets=source_secrets_line(),
        job_line=supervisor_line() if supervised else job.command,
        run_end_line=run_end_line(),
    )


def run_json(
    job: Job,
    *,
    session: str,
    host: str,
    started: float,
    sync: dict[str, object] | None,
    sweep_index: int,
    sweep_size: int,
    hosts: Sequence[str] | None = None,
    machine_rank: int | None = None,
    restart: dict[str, object] | None = None,
    group: dict[str, object] | None = None,
) -> str:
    """run.json; a run over several hosts records all of them (``hosts``, machine rank 0 first) and
    this host's ``machine_rank``, so every host's copy names the one run, and where its ranks'
    supervisors meet (``group``: rank 0's address and port, pippa_agent.supervise.group)."""
    meta: dict[str, object] = {
        "run_id": job.run_id,
        "session": session,
        "host": host,
        "recipe": job.recipe,
        "command": job.command,
        "argv": list(job.argv) if job.argv is not None else None,
        "started": started,
        "sync": sync,
        "sweep_index": sweep_index,
        "sweep_size": sweep_size,
    }
    if hosts is not None:
        meta.update(hosts=list(hosts), machine_rank=machine_rank)
    if group is not None:
        meta["group"] = group
    if restart is not None:
        meta["restart"] = restart  # the host supervisor's policy (launching.restart, pippa_agent.supervise)
    return json.dumps(meta)


def rendezvous_args(machines: int, rank: int, main_addr: str, main_port: int) -> str:
    """What ``training_core.launch`` needs to be machine ``rank`` of ``machines`` meeting at host 0."""
    return shlex.join(
        [
            "--machines",
            str(machines),
            "--machine-rank",
            str(rank),
            "--main-addr",
            main_addr,
            "--main-port",
            str(main_port),
        ]
    )


# a run over several hosts without a shared file system: every host keeps a whole checkpoint of its own
# (transformers' save_on_each_node), so each rank resumes from its own disk (training_core.launch)
LOCAL_CHECKPOINTS = "--checkpoint-each-host"


def group_port(run_id: str) -> int:
    """The c10d rendezvous port of a multi-host run: fixed by its id (all hosts agree without a round
    trip), in 20000-39999."""
    import zlib

    return 20000 + zlib.crc32(run_id.encode()) % 20000


def session_argv(remote_dir: str, run_ids: Sequence[str], gap_s: float) -> list[str]:
    """What the tmux session execs: each run's cmd.sh in turn, ``gap_s`` apart, failures not stopping it.

    The outer shell traps SIGINT so Ctrl-C reaches the job without killing the session (and with it
    the trainer's chance to save); ``pippa stop`` ends the rest of a sweep through stop_requested.
    """
    steps = [f"sh {sh_path(RunDir(remote_dir, rid).cmd_sh)}" for rid in run_ids]
    gap = f"; sleep {float(gap_s):g}; " if gap_s > 0 else "; "
    return ["sh", "-c", "trap : INT; " + gap.join(steps)]
