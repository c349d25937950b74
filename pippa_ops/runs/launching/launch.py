"""Runs: launch recipes or commands in a named tmux session on a host, and stop them.

A launch is a sync (for ``local``: only the marker) then ONE request to the host agent
(``pippa_agent.runs.launch``) that checks tmux, refuses or replaces the session, writes
``runs/<id>/{run.json,cmd.sh}`` and starts the session.
Listing and state live in ``runs.records.listing``; the script builders in ``runs.launching.script``;
this module only orders the steps. It imports no typer/rich/textual: the dashboard reuses it.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pippa_contract import states, verbs
from pippa_contract.names import new_run_id
from pippa_contract.rundir import ATTEMPTS_JSON, RunDir
from pippa_ops.errors import BadSetting, NotResumable, RunStillActive
from pippa_ops.hosts.connect import connect, open_transport
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.precheck import check_python
from pippa_ops.runs.launching.recipes import check_recipe, check_settings, recipes_dir
from pippa_ops.runs.launching.restart import RestartFlags
from pippa_ops.runs.launching.schedulers import (
    LaunchResult,
    Submission,
    host_python,
    launch_request,
    scheduler_for,
    scheduler_of,
    start_session,
    sync_for_launch,
)
from pippa_ops.runs.launching.script import (
    DEFAULT_GAP_S,
    DEFAULT_SESSION,
    LOCAL_CHECKPOINTS,
    Job,
    cmd_job,
    group_port,
    parse_sets,
    recipe_job,
    render_cmd_sh,
    rendezvous_args,
    resume_job,
    run_json,
)
from pippa_ops.runs.records.follow import follow_to_end, read_all
from pippa_ops.runs.records.listing import HostRuns, RunRecord, current_run, list_runs
from pippa_ops.runs.records.tmux import attach_argv as tmux_attach_argv
from pippa_ops.runs.records.tmux import switch_client_argv
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import join, validate_session

if TYPE_CHECKING:  # the verbs' message types, for annotations only
    from pippa_contract import messages

# A trainer finishes its step, then saves (a GRPO step of a 1.5B model plus its checkpoint can take
# minutes on one GPU); the wait ends as soon as the run has written its exit code.
DEFAULT_GRACE_S = 180.0
SyncInfo = dict[str, object]


def attach_argv(spec: HostSpec, session: str, *, switch_client: bool = False) -> list[str]:
    """The one attach command line (``pippa attach``, the dashboard, the launch hint): tmux attach,
    over ``ssh -t`` unless the host is local; ``switch_client`` (a local client already inside
    tmux) switches that client instead of nesting one."""
    from pippa_ops.hosts.connect import ssh_argv  # only for a remote host

    if spec.is_local:
        return switch_client_argv(session) if switch_client else tmux_attach_argv(session)
    return [*ssh_argv(spec), join(tmux_attach_argv(session))]


_LAUNCH_FLAGS = {"launch.gpus": "--gpus", "launch.processes": "--processes", "launch.strategy": "--strategy"}


def _flags_of(sets: Sequence[str]) -> str:
    """The options the user typed that became ``sets`` (--gpus is launch.gpus=...), for a refusal."""
    flags = dict.fromkeys(_LAUNCH_FLAGS.get(s.partition("=")[0].strip(), "--set") for s in sets)
    return "/".join(flags)


def launch_sets(gpus: str | None, processes: int | None, strategy: str | None) -> list[str]:
    """``--gpus/--processes/--strategy`` as the recipe settings they stand for (the trainer checks them)."""
    out = []
    if gpus is not None:
        out.append(f"launch.gpus={json.dumps(gpus)}")
    if processes is not None:
        out.append(f"launch.processes={processes}")
    if strategy is not None:
        out.append(f"launch.strategy={json.dumps(strategy)}")
    return out


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
            raise BadSetting(f"{_flags_of(sets)} applies to recipes, not to --cmd")
        return [cmd_job(new_run_id("cmd", now), command)]
    for name in recipes:
        check_recipe(name)
        check_settings(name, sets)
    python = host_python(spec)
    return [recipe_job(new_run_id(name, now), name, python, remote_dir, parsed) for name in recipes]


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
    preflight: Callable[[agent_client.Session], None] | None = None,
) -> LaunchResult:
    """Start ``recipes`` (one after another) or ``command`` in tmux ``session`` on the host.
    ``sync=False`` launches what the host already has (the run records no commit); ``restart``: the
    retry and stall flags over each recipe's ``[restart]`` table (runs.launching.restart); ``preflight`` runs
    first on the launch's own agent (runs.launching.health: refuse an unhealthy host, warn of busy GPUs)."""
    validate_session(session)
    now = time.time()
    remote_dir = spec.remote_dir
    jobs = plan_jobs(spec, remote_dir, recipes, command, sets, now)
    with agent_client.Session(transport) as agent:
        if preflight is not None:
            preflight(agent)
        plan = Submission(spec, transport, agent, jobs, session, replace, gap_s, sync, now, restart, nodes)
        return scheduler_for(spec).submit(plan)


def launch_group(
    specs: Sequence[HostSpec],
    transports: Sequence[Transport],
    recipe: str,
    *,
    session: str = DEFAULT_SESSION,
    sets: Sequence[str] = (),
    main_port: int | None = None,
    sync: bool = True,
    restart: RestartFlags | None = None,
) -> LaunchResult:
    """One run over several hosts: each is synced and starts one launcher (machine rank = its place in
    ``specs``) in tmux ``session``, all meeting over c10d at the first host's address. Every host's
    run directory has the same run id; its run.json names all the hosts (``runs.records.listing`` merges
    them).
    Each rank runs under its host's supervisor (``restart``: the retry and stall flags), and the
    supervisors fail and restart together, meeting at the first host's c10d port + 1
    (pippa_agent.supervise.group)."""
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
    policy = (restart or RestartFlags()).policy_for(recipe, recipes_dir())
    group = {"addr": str(first.address), "port": port + 1} if policy.active else None
    sync_info: SyncInfo | None = None
    for rank, (spec, transport) in enumerate(zip(specs, transports, strict=True)):
        job = recipe_job(run_id, recipe, host_python(spec), spec.remote_dir, parse_sets(sets))
        meet = rendezvous_args(len(specs), rank, str(first.address), port)
        job = dataclasses.replace(job, command=f"{job.command} {meet} {LOCAL_CHECKPOINTS}")
        with agent_client.Session(transport) as agent:
            marker: list[dict[str, object]] = []
            info = sync_for_launch(spec, transport, marker, agent) if sync else None
            check_python(spec, host_python(spec), agent)
            sync_info = sync_info or info
            runs: list[messages.LaunchRun] = [
                {
                    "run_id": run_id,
                    "run_json": run_json(
                        job,
                        session=session,
                        host=spec.name,
                        started=now,
                        sync=info,
                        sweep_index=0,
                        sweep_size=1,
                        hosts=names,
                        machine_rank=rank,
                        restart=policy.to_json() if policy.active else None,
                        group=group,
                    ),
                    "cmd_sh": render_cmd_sh(job, spec.remote_dir, spec.env, supervised=policy.active),
                }
            ]
            request = launch_request(spec.remote_dir, session, runs, stamp=now, marker=marker)
            start_session(agent, request, spec.name, "is running; stop it or pick another --name")
    return LaunchResult(",".join(names), session, (run_id,), sync_info)


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
        if run.state == states.FINISHED:
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
            if run.max_attempts is not None and isinstance(run.attempts_doc, dict):
                # a supervised run's attempts run run.json's command plus attempts.json's overrides (an
                # OOM retry's batch): these settings join them, for the rest of the run
                doc = {**run.attempts_doc, "overrides": [*(run.attempts_doc.get("overrides") or []), *extra]}
                verbs.write_file(
                    agent, f"{RunDir(spec.remote_dir, run.run_id).path}/{ATTEMPTS_JSON}", json.dumps(doc)
                )
        return scheduler_for(spec).resume(spec, agent, run, job, session)


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
    killed = scheduler_of(run).stop(spec, agent, run, host_runs, grace_s)
    after = _find(list_runs(transport, spec.remote_dir, agent=agent), run.run_id)
    return StopResult(spec.name, run.session, run, after, killed)


def launch_on_hosts(
    hosts: Sequence[str],
    recipe: str,
    *,
    session: str,
    sets: Sequence[str],
    restart: RestartFlags | None = None,
) -> LaunchResult:
    """``pippa run --hosts a,b``: connect to each named host once, in order, and ``launch_group``."""
    if restart is not None and restart.failover:
        raise BadSetting("--failover moves a run to another host; a run over --hosts restarts where it is")
    connected = [connect(n) for n in dict.fromkeys(hosts)]
    try:
        return launch_group(
            [c[0] for c in connected],
            [c[1] for c in connected],
            recipe,
            session=session,
            sets=sets,
            restart=restart,
        )
    finally:
        for _, transport in connected:
            transport.close()


def _find(host_runs: HostRuns, run_id: str) -> RunRecord | None:
    return next((r for r in host_runs.runs if r.run_id == run_id), None)


def follow_run(
    spec: HostSpec,
    transport: Transport,
    run_id: str,
    session: str,
    write: Callable[[bytes], None],
    notify: Callable[[str], None],
    redact: bool = True,
) -> tuple[int | None, Transport]:
    """Stream a run's output.log until the run ends; its exit code (None: killed) and the live transport.

    A dropped connection (laptop asleep, network gone) is ridden out: reconnect with backoff and
    resume from the byte offset, so the output arrives whole and once. The returned transport is the
    one now open (a new one after a reconnect): the caller closes it.
    """
    run_dir = RunDir(spec.remote_dir, run_id)
    pending = [transport]

    def connect_again() -> Transport:
        return pending.pop() if pending else open_transport(spec)

    tmux_session = scheduler_for(spec).follow_session(session)
    live = follow_to_end(
        connect_again,
        run_dir.output_log,
        write,
        notify,
        end_file=run_dir.exit_code,
        session=tmux_session,
        redact=redact,
    )
    code = read_all(live, run_dir.exit_code).strip()
    return (int(code) if code.lstrip(b"-").isdigit() else None), live
