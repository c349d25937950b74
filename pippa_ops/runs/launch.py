"""Runs: launch recipes or commands in a named tmux session on a host, and stop them.

A launch is a sync (for ``local``: only the marker) then ONE request to the host agent
(``pippa_agent.runs.launch``) that checks tmux, refuses or replaces the session, writes
``runs/<id>/{run.json,cmd.sh}`` and starts the session.
Listing and state live in ``runs.listing``; the script builders in ``runs.script``; this module only
orders the steps. It imports no typer/rich/textual: the dashboard reuses it.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pippa_contract import verbs
from pippa_contract.names import new_run_id
from pippa_contract.rundir import RunDir
from pippa_ops.errors import BadSetting, NotResumable, RunStillActive, SessionExists
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.hosts.scheduler import SlurmSpec
from pippa_ops.repo import repo_root
from pippa_ops.runs.follow import follow_to_end, read_all
from pippa_ops.runs.listing import HostRuns, RunRecord, current_run, list_runs
from pippa_ops.runs.precheck import check_python
from pippa_ops.runs.recipes import check_recipe, check_settings, recipes_dir
from pippa_ops.runs.restart import RestartFlags, supervisor_source
from pippa_ops.runs.script import (
    DEFAULT_GAP_S,
    DEFAULT_SESSION,
    Job,
    cmd_job,
    group_port,
    parse_sets,
    recipe_job,
    render_cmd_sh,
    rendezvous_args,
    resume_job,
    run_json,
    session_argv,
)
from pippa_ops.runs.slurm import render_sbatch
from pippa_ops.runs.tmux import attach_argv as tmux_attach_argv
from pippa_ops.runs.tmux import switch_client_argv
from pippa_ops.sync import sync as sync_repo
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import join, validate_session

# A trainer finishes its step, then saves (a GRPO step of a 1.5B model plus its checkpoint can take
# minutes on one GPU); the wait ends as soon as the run has written its exit code.
DEFAULT_GRACE_S = 180.0
SyncInfo = dict[str, object]


@dataclass(frozen=True)
class LaunchResult:
    host: str
    session: str
    run_ids: tuple[str, ...]
    sync: SyncInfo | None
    job_ids: tuple[str, ...] = ()  # SLURM jobs, one per run, on a SLURM host

    def attach_hint(self) -> str:
        if self.job_ids:
            return f"none for a batch job (pippa attach {self.run_ids[0]} --host {self.host} says why)"
        return f"pippa attach {self.session} --host {self.host}"

    def logs_hint(self) -> str:
        return f"pippa logs {self.run_ids[0]} --host {self.host} -f"


def attach_argv(spec: HostSpec, session: str, *, switch_client: bool = False) -> list[str]:
    """The one attach command line (``pippa attach``, the dashboard, the launch hint): tmux attach,
    over ``ssh -t`` unless the host is local; ``switch_client`` (a local client already inside
    tmux) switches that client instead of nesting one."""
    from pippa_ops.hosts.connect import ssh_argv  # paramiko, only for a remote host

    if spec.is_local:
        return switch_client_argv(session) if switch_client else tmux_attach_argv(session)
    return [*ssh_argv(spec), join(tmux_attach_argv(session))]


def local_python(root: Path) -> str:
    """The host ``local`` runs training with the repo's .venv python, else this interpreter."""
    venv = root / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    import sys

    return sys.executable


def sync_for_launch(
    spec: HostSpec, transport: Transport, marker: list[dict[str, object]], agent: agent_client.Session
) -> SyncInfo:
    """Sync the repo (for ``local`` it only writes the marker); commit + dirty. A no-change sync
    leaves its marker in ``marker``: the launch request writes it (one round trip fewer), and its
    agent process is the one that then launches (one Python start-up on the host, not two)."""
    result = sync_repo(spec, transport, repo_root(), defer_marker=marker, agent=agent)
    return {"commit": result.commit, "dirty": result.dirty}


def plan_jobs(
    spec: HostSpec,
    remote_dir: str,
    recipes: Sequence[str],
    command: str | None,
    sets: Sequence[str],
    now: float,
) -> list[Job]:
    """Validate everything (names, --set keys, recipes) and build the jobs; nothing touches a host."""
    parsed = parse_sets(sets)
    if command is not None:
        if recipes:
            raise BadSetting("give recipes or --cmd, not both")
        if parsed:
            raise BadSetting("--set applies to recipes, not to --cmd")
        return [cmd_job(new_run_id("cmd", now), command)]
    for name in recipes:
        check_recipe(name)
        check_settings(name, sets)
    python = _python(spec)
    return [recipe_job(new_run_id(name, now), name, python, remote_dir, parsed) for name in recipes]


def _python(spec: HostSpec) -> str | None:
    """The host's python setting; for ``local`` without one, the repo's venv (else this interpreter)."""
    if spec.is_local and spec.python is None:
        return local_python(Path(spec.remote_dir))
    return spec.python


def launch(
    spec: HostSpec,
    transport: Transport,
    *,
    recipes: Sequence[str] = (),
    command: str | None = None,
    session: str = DEFAULT_SESSION,
    sets: Sequence[str] = (),
    replace: bool = False,
    gap_s: float = DEFAULT_GAP_S,
    sync: bool = True,
    nodes: int | None = None,
    restart: RestartFlags | None = None,
) -> LaunchResult:
    """Start ``recipes`` (one after another) or ``command`` in tmux ``session`` on the host.
    ``sync=False`` launches what the host already has (the run records no commit); ``restart``: the
    retry and stall flags over each recipe's ``[restart]`` table (runs.restart)."""
    validate_session(session)
    now = time.time()
    remote_dir = spec.remote_dir
    jobs = plan_jobs(spec, remote_dir, recipes, command, sets, now)
    with agent_client.Session(transport) as agent:
        if spec.scheduler == "slurm":
            if restart is not None and restart.given:
                raise BadSetting(f"{spec.name} is a SLURM host: --retry and --stall-timeout run in a tmux "
                                 "session's supervisor and are not supported for batch jobs")  # fmt: skip
            sync_info, job_ids = _submit(spec, transport, agent, jobs, nodes, sync, now)
            return LaunchResult(spec.name, "slurm", tuple(j.run_id for j in jobs), sync_info, job_ids)
        if nodes is not None:
            raise BadSetting(f"--nodes needs a SLURM host; {spec.name} runs jobs in tmux")
        sync_info = _launch(spec, transport, agent, jobs, session, replace, gap_s, sync, now,
                            restart or RestartFlags())  # fmt: skip
    return LaunchResult(spec.name, session, tuple(j.run_id for j in jobs), sync_info)


def launch_group(
    specs: Sequence[HostSpec],
    transports: Sequence[Transport],
    recipe: str,
    *,
    session: str = DEFAULT_SESSION,
    sets: Sequence[str] = (),
    main_port: int | None = None,
    sync: bool = True,
) -> LaunchResult:
    """One run over several hosts: each is synced and starts one launcher (machine rank = its place in
    ``specs``) in tmux ``session``, all meeting over c10d at the first host's address. Every host's
    run directory has the same run id; its run.json names all the hosts (``runs.listing`` merges them)."""
    validate_session(session)
    if len(specs) < 2 or len({s.name for s in specs}) != len(specs):
        raise BadSetting("--hosts needs two or more different hosts")
    first = specs[0]
    if first.is_local or not first.address:
        raise BadSetting("the first of --hosts is the rendezvous: it needs an address the others reach")
    if any(s.scheduler != "tmux" for s in specs):
        raise BadSetting("--hosts starts runs in tmux; a SLURM cluster spans nodes with --nodes")
    now = time.time()
    names = [s.name for s in specs]
    run_id = plan_jobs(first, first.remote_dir, [recipe], None, sets, now)[0].run_id  # checks it all once
    port = main_port or group_port(run_id)
    sync_info: SyncInfo | None = None
    for rank, (spec, transport) in enumerate(zip(specs, transports, strict=True)):
        job = recipe_job(run_id, recipe, _python(spec), spec.remote_dir, parse_sets(sets))
        meet = rendezvous_args(len(specs), rank, str(first.address), port)
        job = dataclasses.replace(job, command=f"{job.command} {meet}")
        with agent_client.Session(transport) as agent:
            marker: list[dict[str, object]] = []
            info = sync_for_launch(spec, transport, marker, agent) if sync else None
            check_python(spec, _python(spec), agent)
            sync_info = sync_info or info
            request: verbs.LaunchRequest = {
                "remote_dir": spec.remote_dir,
                "session": session,
                "runs": [{
                    "run_id": run_id,
                    "run_json": run_json(job, session=session, host=spec.name, started=now, sync=info,
                                         sweep_index=0, sweep_size=1, hosts=names, machine_rank=rank),
                    "cmd_sh": render_cmd_sh(job, spec.remote_dir, spec.env),
                }],
                "tmux_argv": _tmux_new(session, spec.remote_dir, [run_id], 0),
                "replace": False,
                "stamp": now,
                "sync_marker": marker[0] if marker else None,
            }  # fmt: skip
            try:
                verbs.launch(agent, request)
            except SessionExists as e:
                raise SessionExists(
                    f"{spec.name}: tmux session {session!r} is running; stop it or pick another --name"
                ) from e
    return LaunchResult(",".join(names), session, (run_id,), sync_info)


def _submit(
    spec: HostSpec,
    transport: Transport,
    agent: agent_client.Session,
    jobs: list[Job],
    nodes: int | None,
    sync: bool,
    now: float,
) -> tuple[SyncInfo | None, tuple[str, ...]]:
    """One sbatch job per run (a sweep's runs queue on the cluster side by side, not one after another)."""
    slurm = spec.slurm or SlurmSpec()
    if nodes is not None:
        slurm = dataclasses.replace(slurm, nodes=nodes)
    marker: list[dict[str, object]] = []
    sync_info = sync_for_launch(spec, transport, marker, agent) if sync else None
    job_ids = []
    for i, job in enumerate(jobs):
        meta = run_json(job, session="slurm", host=spec.name, started=now, sync=sync_info, sweep_index=i,
                        sweep_size=len(jobs))  # fmt: skip
        request: verbs.SlurmSubmitRequest = {
            "remote_dir": spec.remote_dir,
            "run_id": job.run_id,
            "run_json": meta,
            "script": render_sbatch(
                slurm, job.run_id, spec.remote_dir, job.command, spec.env, rendezvous=job.recipe is not None
            ),
            "sync_marker": marker[0] if marker and i == 0 else None,
        }
        job_ids.append(str(verbs.slurm_submit(agent, request)["job_id"]))
    return sync_info, tuple(job_ids)


def _launch(
    spec: HostSpec,
    transport: Transport,
    agent: agent_client.Session,
    jobs: list[Job],
    session: str,
    replace: bool,
    gap_s: float,
    sync: bool,
    now: float,
    restart: RestartFlags,
) -> SyncInfo | None:
    remote_dir = spec.remote_dir
    policies = [restart.policy_for(job.recipe, recipes_dir()) for job in jobs]  # checked before a sync
    marker: list[dict[str, object]] = []  # a no-change sync's marker: written by the launch request
    sync_info = sync_for_launch(spec, transport, marker, agent) if sync else None
    if any(job.recipe for job in jobs):  # nothing starts with a python that cannot run the trainer
        check_python(spec, _python(spec), agent)
    runs: list[verbs.LaunchRun] = [
        {
            "run_id": job.run_id,
            "run_json": run_json(
                job,
                session=session,
                host=spec.name,
                started=now,
                sync=sync_info,
                sweep_index=i,
                sweep_size=len(jobs),
                restart=policy.to_json() if policy.active else None,
            ),
            "cmd_sh": render_cmd_sh(job, remote_dir, spec.env, supervised=policy.active),
            "supervisor": supervisor_source() if policy.active else None,
        }
        for i, (job, policy) in enumerate(zip(jobs, policies, strict=True))
    ]
    request: verbs.LaunchRequest = {
        "remote_dir": remote_dir,
        "session": session,
        "runs": runs,
        "tmux_argv": _tmux_new(session, remote_dir, [j.run_id for j in jobs], gap_s),
        "replace": replace,
        "stamp": now,
        "sync_marker": marker[0] if marker else None,
    }
    try:
        verbs.launch(agent, request)
    except SessionExists as e:
        raise SessionExists(
            f"{spec.name}: tmux session {session!r} is running; stop it, pick another --name, or --replace"
        ) from e
    return sync_info


def _tmux_new(session: str, remote_dir: str, run_ids: Sequence[str], gap_s: float) -> list[str]:
    from pippa_ops.runs.tmux import new_session_argv

    return new_session_argv(session, session_argv(remote_dir, run_ids, gap_s))


def resume(
    spec: HostSpec, transport: Transport, name: str, *, session: str | None = None, sets: Sequence[str] = ()
) -> LaunchResult:
    """Continue the stopped, failed, killed or lost recipe run ``name`` (run id or session) from its newest
    checkpoint, in the same run directory, in a new tmux session (``session``, default: the run's
    own). Runs what the host has (no sync): the code the run started with, unless you synced since."""
    with agent_client.Session(transport) as agent:
        run = current_run(list_runs(transport, spec.remote_dir, agent=agent), name)
        if run.active:
            raise RunStillActive(
                f"{spec.name}: run {run.run_id} is still {run.state} in session {run.session}; "
                f"nothing to resume (pippa stop {run.run_id} first to restart it)"
            )
        if run.state == "finished":
            raise NotResumable(f"{spec.name}: run {run.run_id} finished (exit 0): nothing to resume")
        if run.recipe is None:
            raise NotResumable(
                f"{spec.name}: run {run.run_id} ran a command (--cmd), not a recipe: it has no checkpoint "
                "to resume from"
            )
        job = resume_job(run.run_id, run.recipe, run.command)
        if sets:  # a setting that made the run fail, fixed for the rest of it (the last --set wins)
            check_settings(run.recipe, sets)
            extra = [a for key, value in parse_sets(sets) for a in ("--set", f"{key}={value}")]
            job = dataclasses.replace(job, command=f"{job.command} {shlex.join(extra)}")
        if spec.scheduler == "slurm":
            script = render_sbatch(spec.slurm or SlurmSpec(), run.run_id, spec.remote_dir, job.command,
                                   spec.env)  # fmt: skip
            answer = verbs.slurm_submit(
                agent,
                {
                    "remote_dir": spec.remote_dir,
                    "run_id": run.run_id,
                    "resume": True,
                    "stamp": time.time(),
                    "script": script,
                },
            )
            return LaunchResult(spec.name, "slurm", (run.run_id,), None, (str(answer["job_id"]),))
        session = validate_session(session or run.session)
        # A supervised run (--retry) continues under its supervisor: one more recorded attempt, with --resume.
        supervised = run.max_attempts is not None
        cmd_sh = render_cmd_sh(job, spec.remote_dir, spec.env, supervised=supervised)
        supervisor = supervisor_source() if supervised else None
        request: verbs.LaunchRequest = {
            "remote_dir": spec.remote_dir,
            "session": session,
            "runs": [{"run_id": run.run_id, "resume": True, "cmd_sh": cmd_sh, "supervisor": supervisor}],
            "tmux_argv": _tmux_new(session, spec.remote_dir, [run.run_id], 0),
            "replace": False,
            "stamp": time.time(),
        }
        try:
            verbs.launch(agent, request)
        except SessionExists as e:
            raise SessionExists(
                f"{spec.name}: tmux session {session!r} is in use; resume into another with --name"
            ) from e
    return LaunchResult(spec.name, session, (run.run_id,), None)


@dataclass(frozen=True)
class StopResult:
    host: str
    session: str
    before: RunRecord
    after: RunRecord | None
    killed_session: bool


def stop(spec: HostSpec, transport: Transport, name: str, *, grace_s: float = DEFAULT_GRACE_S) -> StopResult:
    """Interrupt the run ``name`` (run id or session) so it can save, kill after ``grace_s``:
    its runs are marked stop_requested, the session gets Ctrl-C, and is killed once the run has
    written its exit code or the grace period is over (ending a sweep's remaining runs)."""
    with agent_client.Session(transport) as agent:  # list, stop, list again: one agent process
        return _stop(spec, transport, agent, name, grace_s)


def _stop(
    spec: HostSpec, transport: Transport, agent: agent_client.Session, name: str, grace_s: float
) -> StopResult:
    host_runs = list_runs(transport, spec.remote_dir, agent=agent)
    run = current_run(host_runs, name)
    if not run.active:
        return StopResult(spec.name, run.session, run, run, False)
    if run.job_id is not None:  # SIGINT to the job's processes (the trainer saves), then scancel
        cancel = verbs.slurm_stop(agent, spec.remote_dir, run.run_id, run.job_id, grace_s, time.time())
        after = _find(list_runs(transport, spec.remote_dir, agent=agent), run.run_id)
        return StopResult(spec.name, run.session, run, after, bool(cancel.get("cancelled")))
    session_runs = [r.run_id for r in host_runs.runs if r.session == run.session and r.active]
    answer = verbs.stop(agent, spec.remote_dir, run.session, session_runs, run.run_id, grace_s, time.time())
    after = _find(list_runs(transport, spec.remote_dir, agent=agent), run.run_id)
    return StopResult(spec.name, run.session, run, after, bool(answer.get("killed_session")))


def _find(host_runs: HostRuns, run_id: str) -> RunRecord | None:
    return next((r for r in host_runs.runs if r.run_id == run_id), None)


def follow_run(
    spec: HostSpec,
    transport: Transport,
    run_id: str,
    session: str,
    write: Callable[[bytes], None],
    notify: Callable[[str], None],
) -> tuple[int | None, Transport]:
    """Stream a run's output.log until the run ends; its exit code (None: killed) and the live transport.

    A dropped connection (laptop asleep, network gone) is ridden out: reconnect with backoff and
    resume from the byte offset, so the output arrives whole and once. The returned transport is the
    one now open (a new one after a reconnect): the caller closes it.
    """
    run_dir = RunDir(spec.remote_dir, run_id).path
    pending = [transport]

    def connect_again() -> Transport:
        return pending.pop() if pending else open_transport(spec)

    log, end = f"{run_dir}/output.log", f"{run_dir}/exit_code"
    tmux_session = None if session.startswith("slurm") else session  # a batch job: its exit_code ends it
    live = follow_to_end(connect_again, log, write, notify, end_file=end, session=tmux_session)
    code = read_all(live, f"{run_dir}/exit_code").strip()
    return (int(code) if code.lstrip(b"-").isdigit() else None), live
