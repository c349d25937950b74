"""``pippa run / resume / recipes``: parse options, call the core, render, exit.

No shell strings or business logic here: launching lives in ``runs.launching.launch``, watching a
start in ``runs.launching.startup``, following in ``runs.reading.logs``; this module only turns their
values into lines. rich is not imported: ``run`` starts without it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pippa_contract.rundir import CHECKPOINTS, RUNS
from pippa_ops.cli.common import (
    HOST_HELP,
    FollowOpt,
    HostOpt,
    JsonOpt,
    RawOpt,
    RunsDirOpt,
    SetOpt,
    emit_json,
    note,
)
from pippa_ops.cli.complete import host_names, recipe_names
from pippa_ops.cli.follow_out import follow_runs
from pippa_ops.cli.start_out import NoWaitOpt, WaitOpt, report_start
from pippa_ops.errors import BadSetting
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import HostSpec, default_host
from pippa_ops.runs.launching.launch import (
    LaunchResult,
    attach_argv,
    launch,
    launch_on_hosts,
    launch_sets,
    resume,
)
from pippa_ops.runs.launching.restart import RestartFlags
from pippa_ops.runs.launching.schedulers import scheduler_for
from pippa_ops.runs.launching.script import DEFAULT_GAP_S, DEFAULT_SESSION
from pippa_ops.runs.moving.locate import locate_host
from pippa_ops.runs.records.listing import current_run, list_runs
from pippa_ops.transport.shell import join


def render_launch(result: LaunchResult, spec: HostSpec, chosen: bool = True, verbose: bool = False) -> None:
    for i, run_id in enumerate(result.run_ids):
        job = f"   (SLURM job {result.job_ids[i]})" if result.job_ids else ""
        typer.echo(f"started {run_id}{job}")
    where = "" if chosen else "   (the default host: --host, or default_host in ~/.config/pippa/hosts.toml)"
    typer.echo(f"  host:    {result.host}{where}")
    if result.job_ids:
        typer.echo(f"  attach:  {result.attach_hint()}")
        typer.echo(f"  logs:    {result.logs_hint()}")
        return
    typer.echo(f"  session: {result.session}")
    typer.echo(f"  attach:  {result.attach_hint()}")
    if verbose and not spec.is_local:  # the system ssh's own line, for a terminal without pippa
        typer.echo(f"  ssh:     {join(attach_argv(spec, result.session))}")
    typer.echo(f"  logs:    {result.logs_hint()}")


def render_group(result: LaunchResult) -> None:
    typer.echo(f"started {result.run_ids[0]}")
    typer.echo(f"  hosts:   {result.host}   (machine rank 0 first: the rendezvous)")
    typer.echo(f"  session: {result.session} on each")
    typer.echo(f"  logs:    pippa logs {result.run_ids[0]} -f   (rank 0's output)")
    typer.echo(f"  stop:    pippa stop {result.run_ids[0]}   (every host)")


def run_cmd(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipe names (several: a sweep). Default: tiny.",
            show_default=False,
            autocompletion=recipe_names,
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            "-H",
            show_default=False,
            autocompletion=host_names,
            help=HOST_HELP + " Default: default_host in ~/.config/pippa/hosts.toml, else local.",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="tmux session name.")] = DEFAULT_SESSION,
    cmd: Annotated[
        str | None, typer.Option("--cmd", help="Run this shell command instead of a recipe.")
    ] = None,
    set_: SetOpt = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace a running session of that name.")
    ] = False,
    gap: Annotated[float, typer.Option("--gap", help="Seconds between the runs of a sweep.")] = DEFAULT_GAP_S,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="GPU ids for the run, e.g. 0-6 or 0,2 (launch.gpus).")
    ] = None,
    processes: Annotated[
        int | None, typer.Option("--processes", help="Training processes, one per GPU (launch.processes).")
    ] = None,
    strategy: Annotated[
        str | None, typer.Option("--strategy", help="ddp, zero2 or zero3 (launch.strategy).")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="SLURM hosts: nodes for the job (over the host entry's).")
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option("--hosts", help="One run over several hosts, e.g. h100-a,h100-b (first: rendezvous)."),
    ] = None,
    follow: FollowOpt = False,
    raw: RawOpt = False,
    notify: Annotated[
        bool,
        typer.Option("--notify", help="When the runs end: terminal bell, a line, a desktop notification."),
    ] = False,
    wait: WaitOpt = None,
    no_wait: NoWaitOpt = False,
    retry: Annotated[
        int | None,
        typer.Option(
            "--retry",
            help="Rerun a crashed run up to N times on the host, with --resume "
            "(over the recipe's [restart] max_attempts).",
            show_default=False,
        ),
    ] = None,
    stall_timeout: Annotated[
        str | None,
        typer.Option(
            "--stall-timeout",
            help="No new metrics line (--cmd: output) for this long after a step, e.g. 20m: "
            "stop the attempt and retry it. Default for recipes: 5 x the median step time, at least 5m; "
            "off: no stall watch.",
            show_default=False,
        ),
    ] = None,
    retry_diverged: Annotated[
        bool | None,
        typer.Option(
            "--retry-diverged",
            help="Retry a run whose loss or reward became NaN/inf too.",
            show_default=False,
        ),
    ] = None,
    backoff: Annotated[
        str | None,
        typer.Option(
            "--backoff",
            help="First wait before a retry (doubles, capped at 10m). Default 30s.",
            show_default=False,
        ),
    ] = None,
    infra_retries: Annotated[
        int | None,
        typer.Option(
            "--infra-retries",
            help="Retries of lost / nccl / stalled attempts that do not count in --retry. Default 3.",
            show_default=False,
        ),
    ] = None,
    on_oom: Annotated[
        str | None,
        typer.Option(
            "--on-oom",
            help="halve (default): retry an out-of-memory attempt with half the "
            "per-device batch and twice the accumulation; fail: a crash like any other.",
            show_default=False,
        ),
    ] = None,
    failover: Annotated[
        str | None,
        typer.Option(
            "--failover",
            help="h100-b,h100-c: after a gpu-fault, or a host that stays lost, `pippa wait` (and run "
            "--notify's watcher) moves the run to the first healthy host of the list.",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help='"$300": the most the run may spend at the host\'s price; at 80% an alert, at 100% it '
            "saves a checkpoint and stops (class budget).",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print the system ssh command that attaches.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start even where the last `pippa doctor` verdict is fail.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the cmd.sh / job.sbatch, every setting and its source, and "
            "the host checks; start nothing, touch nothing on the host.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start recipes (one after another) or a command in a named tmux session on a host."""
    from pippa_ops.runs.moving.failover import failover_hosts

    restart = RestartFlags(
        retry,
        stall_timeout,
        retry_diverged,
        backoff,
        infra_retries,
        on_oom,
        failover_hosts(failover, cmd is not None),
        budget,
    )
    names = list(recipes or [])
    if not names and cmd is None:
        names = ["tiny"]  # the README's main job
    sets = [*(set_ or []), *launch_sets(gpus, processes, strategy)]
    _say_tree()
    if dry_run:
        from pippa_ops.cli.dryrun_out import dry_run_cmd

        return dry_run_cmd(host or default_host(), names, cmd, sets, nodes, restart, hosts, as_json)
    if hosts is not None:
        if host is not None or cmd is not None or len(names) != 1:
            raise BadSetting("--hosts runs one recipe over several hosts (no --host, no --cmd, no sweep)")
        result = launch_on_hosts(
            [h for h in hosts.split(",") if h], names[0], session=name, sets=sets, restart=restart
        )
        if as_json:
            emit_json(
                {
                    "host": result.host,
                    "session": result.session,
                    "run_ids": list(result.run_ids),
                    "sync": result.sync,
                }
            )
        else:
            render_group(result)
        return
    spec, transport = connect(host or default_host())
    with transport:
        from pippa_contract.verbs import Caller
        from pippa_ops.runs.launching.health import preflight

        def check(agent: Caller) -> None:
            preflight(spec, agent, gpus, force, lambda line: typer.echo(line, err=True))

        result = launch(
            spec,
            transport,
            recipes=names,
            command=cmd,
            session=name,
            sets=sets,
            replace=replace,
            gap_s=gap,
            nodes=nodes,
            restart=restart,
            preflight=check,
        )
        if as_json:
            emit_json(
                {
                    "host": result.host,
                    "session": result.session,
                    "run_ids": list(result.run_ids),
                    "job_ids": list(result.job_ids),
                    "sync": result.sync,
                }
            )
        else:
            render_launch(result, spec, chosen=host is not None, verbose=verbose)
        if not (no_wait or follow) and scheduler_for(spec).starts_at_once:
            report_start(transport, spec, result.run_ids[0], wait, recipe=cmd is None, quiet=as_json)
        if notify and not follow:
            from pippa_ops.runs.reading.watcher import spawn_watcher, watcher_log

            pid = spawn_watcher(spec.name, list(result.run_ids))
            if not as_json:
                log = watcher_log(result.run_ids[0])
                typer.echo(f"  notify:  when it ends (watcher pid {pid}; its log: {log})")
        if follow:
            code = follow_runs(transport, spec, list(result.run_ids), result.session, raw=raw)
            if notify:
                from pippa_ops.runs.reading.watcher import notify_ended

                notify_ended(spec.name, list(result.run_ids), note)
            raise typer.Exit(code)


def _say_tree() -> None:
    """When the working directory's checkout is not a pippa project: which tree runs (one line)."""
    from pippa_ops.repo import find_project

    tree = find_project()
    if tree is not None and tree.passed_over is not None:
        note(tree.line("running from"))


def resume_cmd(
    name: Annotated[str, typer.Argument(help="Run id (or session: its latest run).", show_default=False)],
    host: HostOpt = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--name", "-n", help="tmux session to resume in (default: the run's own).", show_default=False
        ),
    ] = None,
    follow: FollowOpt = False,
    set_: SetOpt = None,
    on: Annotated[
        str | None,
        typer.Option(
            "--on",
            help="Move the run to this host (its newest checkpoint and records) and "
            "continue it there; from the pulled copy when its host is unreachable.",
            show_default=False,
        ),
    ] = None,
    runs_dir: RunsDirOpt = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus", help="Continue on these GPUs, e.g. 0,2,3 (after a GPU fault).", show_default=False
        ),
    ] = None,
    wait: WaitOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Continue a stopped or failed recipe run from its newest checkpoint, in the same run directory.

    Its start is watched until its trainer's first line, as ``run``'s is."""
    if gpus is not None:
        if on is not None:
            raise BadSetting("--gpus picks GPUs on the run's own host: --on moves it as it was")
        set_ = [*(set_ or []), *launch_sets(gpus, None, None)]
    if on is not None:
        from pippa_ops.cli.move_cmd import move_and_resume

        return move_and_resume(name, on, host, set_ or [], follow, runs_dir, wait=wait, no_wait=no_wait)
    from pippa_ops.runs.moving.tidy import checked_checkpoints
    from pippa_ops.transport import agent_client

    where = locate_host(name, host)
    spec, transport = connect(where)
    with transport:
        run = current_run(list_runs(transport, spec.remote_dir), name)
        with agent_client.Session(transport) as agent:
            found, skipped = checked_checkpoints(agent, spec.remote_dir, run.run_id)
        result = resume(spec, transport, run.run_id, session=session, sets=list(set_ or []))
        passed = f" ({'; '.join(skipped)})" if skipped else ""  # torn ones: never resumed from
        if found:
            where = f"{RUNS}/{result.run_ids[0]}/{CHECKPOINTS}/{found[-1]}"
            typer.echo(f"resumed {result.run_ids[0]} from {where}{passed}")
        else:
            none = "no whole checkpoint" if skipped else "no checkpoint"
            typer.echo(f"resumed {result.run_ids[0]}: {none}: restarting from step 0{passed}")
        typer.echo(f"  host:    {result.host}")
        typer.echo(f"  session: {result.session}")
        typer.echo(f"  attach:  {result.attach_hint()}")
        typer.echo(f"  logs:    {result.logs_hint()}")
        if follow:
            raise typer.Exit(follow_runs(transport, spec, list(result.run_ids), result.session))
        if not no_wait and scheduler_for(spec).starts_at_once:  # the start watched as `run` does
            report_start(transport, spec, result.run_ids[0], wait, recipe=True, quiet=False)


def recipes_cmd(as_json: JsonOpt = False) -> None:
    """The recipes this repo ships (recipes/*.toml)."""
    from pippa_ops.repo import project
    from pippa_ops.runs.launching.recipes import list_recipes

    tree = project()
    if tree.passed_over is not None:
        note(tree.line("the recipes of"))
    items = list_recipes(tree.root)
    if as_json:
        emit_json([{"name": r.name, "description": r.description} for r in items])
        return
    width = max((len(r.name) for r in items), default=0)
    for r in items:
        typer.echo(f"{r.name.ljust(width)}  {r.description}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("resume")(resume_cmd)
    app.command("recipes")(recipes_cmd)
