"""``pippa run / resume / recipes``: parse options, call the core, render, exit.

No shell strings or business logic here: launching lives in ``runs.launch``, watching a start in
``runs.startup``, following in ``runs.logs``; this module only turns their values into lines. rich
is not imported: ``run`` starts without it.
"""

from __future__ import annotations

import shutil
import sys
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
from pippa_ops.errors import BadSetting, ExitCode
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import HostSpec, default_host
from pippa_ops.runs.launch import LaunchResult, attach_argv, launch, launch_on_hosts, launch_sets, resume
from pippa_ops.runs.listing import RunRecord, current_run, list_runs
from pippa_ops.runs.locate import locate_host
from pippa_ops.runs.restart import RestartFlags
from pippa_ops.runs.schedulers import scheduler_for
from pippa_ops.runs.script import DEFAULT_GAP_S, DEFAULT_SESSION
from pippa_ops.transport.base import Transport
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
        typer.Argument(help="Recipe names (several: a sweep). Default: tiny.", show_default=False,
                       autocompletion=recipe_names),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", "-H", show_default=False, autocompletion=host_names,
                     help=HOST_HELP + " Default: default_host in ~/.config/pippa/hosts.toml, else local."),
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
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            show_default=False,
            help="Most seconds to watch a start: a recipe until its trainer's first line (default "
            "20), a --cmd for an early exit (default 3); or PIPPA_RUN_WAIT_S.",
        ),
    ] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return as soon as the run is started.")] = False,
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
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print the system ssh command that attaches.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start even where the last `pippa doctor` verdict is fail.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start recipes (one after another) or a command in a named tmux session on a host."""
    from pippa_ops.runs.failover import failover_hosts

    restart = RestartFlags(retry, stall_timeout, retry_diverged, backoff, infra_retries, on_oom,
                           failover_hosts(failover, cmd is not None))  # fmt: skip
    names = list(recipes or [])
    if not names and cmd is None:
        names = ["tiny"]  # the README's main job
    sets = [*(set_ or []), *launch_sets(gpus, processes, strategy)]
    _say_tree()
    if hosts is not None:
        if host is not None or cmd is not None or len(names) != 1:
            raise BadSetting("--hosts runs one recipe over several hosts (no --host, no --cmd, no sweep)")
        if restart.given:
            raise BadSetting("--retry and --stall-timeout are not supported with --hosts yet")
        result = launch_on_hosts([h for h in hosts.split(",") if h], names[0], session=name, sets=sets)
        if as_json:
            emit_json({"host": result.host, "session": result.session, "run_ids": list(result.run_ids),
                       "sync": result.sync})  # fmt: skip
        else:
            render_group(result)
        return
    spec, transport = connect(host or default_host())
    with transport:
        from pippa_contract.verbs import Caller
        from pippa_ops.runs.health import preflight

        def check(agent: Caller) -> None:
            preflight(spec, agent, gpus, force, lambda line: typer.echo(line, err=True))

        result = launch(spec, transport, recipes=names, command=cmd, session=name, sets=sets, replace=replace,
                        gap_s=gap, nodes=nodes, restart=restart, preflight=check)  # fmt: skip
        if as_json:
            emit_json({"host": result.host, "session": result.session, "run_ids": list(result.run_ids),
                       "job_ids": list(result.job_ids), "sync": result.sync})  # fmt: skip
        else:
            render_launch(result, spec, chosen=host is not None, verbose=verbose)
        if not (no_wait or follow) and scheduler_for(spec).starts_at_once:
            _report_start(transport, spec, result.run_ids[0], wait, recipe=cmd is None, quiet=as_json)
        if notify and not follow:
            from pippa_ops.runs.watcher import spawn_watcher, watcher_log

            pid = spawn_watcher(spec.name, list(result.run_ids))
            if not as_json:
                log = watcher_log(result.run_ids[0])
                typer.echo(f"  notify:  when it ends (watcher pid {pid}; its log: {log})")
        if follow:
            code = follow_runs(transport, spec, list(result.run_ids), result.session, raw=raw)
            if notify:
                from pippa_ops.runs.watcher import notify_ended

                notify_ended(spec.name, list(result.run_ids), note)
            raise typer.Exit(code)


def _say_tree() -> None:
    """When the working directory's checkout is not a pippa project: which tree runs (one line)."""
    from pippa_ops.repo import find_project

    tree = find_project()
    if tree is not None and tree.passed_over is not None:
        note(tree.line("running from"))


def _report_start(
    transport: Transport, spec: HostSpec, run_id: str, wait: float | None, *, recipe: bool, quiet: bool
) -> None:
    """Watch the start (``runs.startup``): a run that ended in the window says its state and reason
    line, and pippa exits non-zero unless it exited 0; on a terminal, one line of progress meanwhile."""
    from pippa_ops.runs.precheck import failure_hint
    from pippa_ops.runs.startup import wait_seconds, watch_start

    wait_s = wait_seconds(wait, recipe)
    if wait_s <= 0:
        return
    line = _ProgressLine(spec.name, enabled=not quiet and sys.stderr.isatty())
    try:
        watch = watch_start(transport, spec.remote_dir, run_id, wait_s, until_first_line=recipe,
                            progress=line.show if line.enabled else None)  # fmt: skip
    finally:
        line.clear()
    rec = watch.record
    if rec is None or not watch.ended:
        if recipe and not watch.started and not quiet:
            note(f"{spec.name}: run {run_id} is still starting after {watch.waited_s:.0f}s; it goes on "
                 f"(`pippa logs {run_id} --host {spec.name} -f` follows it)")  # fmt: skip
        return
    if rec.state == "finished":
        if not quiet:
            typer.echo(f"  ended:   {rec.state_text}")
        return
    why = f": {rec.error}{failure_hint(rec.error, spec.name)}" if rec.error else ""
    took = f" after {rec.duration_s:.0f}s" if rec.duration_s is not None else ""
    note(f"{spec.name}: run {rec.run_id} {rec.state_text}{took}{why}"
         f" (pippa logs {rec.run_id} --host {spec.name})")  # fmt: skip
    raise typer.Exit(int(ExitCode.FAILURE))


class _ProgressLine:
    """``starting on h100-a: 6s: <the run's last output line>``, redrawn in place on stderr."""

    def __init__(self, host: str, enabled: bool) -> None:
        self.host, self.enabled, self.drawn = host, enabled, False

    def show(self, waited: float, rec: RunRecord | None) -> None:
        text = f"starting on {self.host}: {waited:.0f}s"
        text += f": {rec.last_line}" if rec is not None and rec.last_line else ""
        width = shutil.get_terminal_size((80, 24)).columns - 1
        sys.stderr.write("\r\x1b[2K" + (text if len(text) <= width else text[: width - 1] + "…"))
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


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
        typer.Option("--gpus", help="Continue on these GPUs, e.g. 0,2,3 (after a GPU fault).",
                     show_default=False),
    ] = None,
) -> None:
    """Continue a stopped or failed recipe run from its newest checkpoint, in the same run directory."""
    if gpus is not None:
        if on is not None:
            raise BadSetting("--gpus picks GPUs on the run's own host: --on moves it as it was")
        set_ = [*(set_ or []), *launch_sets(gpus, None, None)]
    if on is not None:
        from pippa_ops.cli.move_cmd import move_and_resume

        return move_and_resume(name, on, host, set_ or [], follow, runs_dir)
    from pippa_ops.runs.tidy import checked_checkpoints
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


def recipes_cmd(as_json: JsonOpt = False) -> None:
    """The recipes this repo ships (recipes/*.toml)."""
    from pippa_ops.repo import project
    from pippa_ops.runs.recipes import list_recipes

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
