"""``pippa run / ps / logs / attach / stop / recipes``: parse options, call the core, render, exit.

No shell strings or business logic here: launching, listing, following and stopping live in
``runs.launch`` / ``runs.listing`` / ``runs.follow``; this module only turns their values into lines.
rich is imported only by ``ps``, which draws a table, so ``run``/``logs``/``stop`` start without it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer

from pippa_ops.cli.common import HOST_HELP, HostOpt, JsonOpt, RunsDirOpt, emit_json, goes_on_line
from pippa_ops.errors import (
    BadSetting,
    ExitCode,
    PippaError,
    RunNotFound,
)
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.connect import connect, open_transport
from pippa_ops.hosts.inventory import LOCAL, HostSpec, default_host, resolve
from pippa_ops.runs.attach import attach_session
from pippa_ops.runs.follow import read_all
from pippa_ops.runs.launch import (
    DEFAULT_GRACE_S,
    LaunchResult,
    StopResult,
    attach_argv,
    follow_run,
    launch,
    launch_group,
    resume,
    stop,
)
from pippa_ops.runs.listing import HostRuns, RunRecord, current_run, list_runs, merge_groups, read_run
from pippa_ops.runs.locate import (
    all_hosts,
    locate_host,
    locate_run,
    locate_run_hosts,
    run_hosts,
    runs_of,
)
from pippa_ops.runs.recipes import list_recipes
from pippa_ops.runs.restart import RestartFlags
from pippa_ops.runs.script import DEFAULT_GAP_S, DEFAULT_SESSION
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import join, validate_name


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


def render_launch(result: LaunchResult, spec: HostSpec, chosen: bool = True) -> None:
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
    typer.echo(f"  attach:  {result.attach_hint()}   (or: {join(attach_argv(spec, result.session))})")
    typer.echo(f"  logs:    {result.logs_hint()}")


def _write_out(chunk: bytes) -> None:
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()


def _note(message: str) -> None:
    typer.echo(f"pippa: {message}", err=True)


def follow_runs(transport: Transport, spec: HostSpec, run_ids: list[str], session: str, skip: int = 0) -> int:
    """Stream each run's log in turn (riding out dropped connections); pippa's exit code from theirs.
    ``skip``: bytes of the first log not to print (``logs --tail N -f``)."""
    codes: list[int | None] = []
    left = [skip]

    def write(chunk: bytes) -> None:
        if left[0]:
            cut = min(left[0], len(chunk))
            left[0] -= cut
            chunk = chunk[cut:]
        if chunk:
            _write_out(chunk)

    for run_id in run_ids:
        try:
            code, transport = follow_run(spec, transport, run_id, session, write, _note)
        except KeyboardInterrupt:  # Ctrl-C stops the following, never the run: say so
            typer.echo(goes_on_line("following", run_id, session, spec.name), err=True)
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        codes.append(code)
    transport.close()
    return _exit_for(codes)


def _exit_for(codes: list[int | None]) -> int:
    bad = [c for c in codes if c != 0]
    if not bad:
        return 0
    last = bad[-1]
    return int(ExitCode.FAILURE) if last is None else last


def run_cmd(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(help="Recipe names (several: a sweep). Default: tiny.", show_default=False),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            "-H",
            help=HOST_HELP + " Default: default_host in ~/.config/pippa/hosts.toml, else local.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="tmux session name.")] = DEFAULT_SESSION,
    cmd: Annotated[
        str | None, typer.Option("--cmd", help="Run this shell command instead of a recipe.")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a recipe value: key=value.")
    ] = None,
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
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the log until the run ends.")
    ] = False,
    notify: Annotated[
        bool,
        typer.Option("--notify", help="When the runs end: terminal bell, a line, a desktop notification."),
    ] = False,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            help="Seconds to watch for an early exit after starting (default 3, or PIPPA_RUN_WAIT_S).",
            show_default=False,
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
    as_json: JsonOpt = False,
) -> None:
    """Start recipes (one after another) or a command in a named tmux session on a host."""
    restart = RestartFlags(retry, stall_timeout, retry_diverged, backoff, infra_retries, on_oom)
    names = list(recipes or [])
    if not names and cmd is None:
        names = ["tiny"]  # the README's main job
    sets = [*(set_ or []), *launch_sets(gpus, processes, strategy)]
    if hosts is not None:
        if host is not None or cmd is not None or len(names) != 1:
            raise BadSetting("--hosts runs one recipe over several hosts (no --host, no --cmd, no sweep)")
        if restart.given:
            raise BadSetting("--retry and --stall-timeout are not supported with --hosts yet")
        result = _run_group([h for h in hosts.split(",") if h], names[0], name, sets)
        if as_json:
            emit_json({"host": result.host, "session": result.session, "run_ids": list(result.run_ids),
                       "sync": result.sync})  # fmt: skip
        else:
            typer.echo(f"started {result.run_ids[0]}")
            typer.echo(f"  hosts:   {result.host}   (machine rank 0 first: the rendezvous)")
            typer.echo(f"  session: {result.session} on each")
            typer.echo(f"  logs:    pippa logs {result.run_ids[0]} -f   (rank 0's output)")
            typer.echo(f"  stop:    pippa stop {result.run_ids[0]}   (every host)")
        return
    spec, transport = connect(host or default_host())
    with transport:
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
            render_launch(result, spec, chosen=host is not None)
        wait_s = 0.0 if no_wait or follow else _wait_seconds(wait)
        if wait_s > 0 and spec.scheduler != "slurm":
            _report_early_exit(transport, spec, result.run_ids[0], wait_s, quiet=as_json)
        if notify and not follow:
            from pippa_ops.runs.watcher import spawn_watcher

            pid = spawn_watcher(spec.name, list(result.run_ids))
            if not as_json:
                from pippa_ops.runs.watcher import watcher_log

                log = watcher_log(result.run_ids[0])
                typer.echo(f"  notify:  when it ends (watcher pid {pid}; its log: {log})")
        if follow:
            code = follow_runs(transport, spec, list(result.run_ids), result.session)
            if notify:
                from pippa_ops.runs.watcher import notify_ended

                notify_ended(spec.name, list(result.run_ids), _note)
            raise typer.Exit(code)


def _wait_seconds(wait: float | None) -> float:
    from pippa_ops.runs.precheck import DEFAULT_WAIT_S, WAIT_ENV

    if wait is not None:
        return max(0.0, wait)
    raw = os.environ.get(WAIT_ENV)
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_WAIT_S
    except ValueError:
        raise BadSetting(f"{WAIT_ENV}={raw!r}: give seconds, e.g. 3") from None


def _report_early_exit(transport: Transport, spec: HostSpec, run_id: str, wait_s: float, quiet: bool) -> None:
    """A run that ended within ``wait_s``: its state and reason line; exit non-zero unless it exited 0."""
    from pippa_ops.runs.precheck import failure_hint, watch_early_exit

    rec = watch_early_exit(transport, spec.remote_dir, run_id, wait_s)
    if rec is None:
        return
    if rec.state == "finished":
        if not quiet:
            typer.echo(f"  ended:   {rec.state_text}")
        return
    why = f": {rec.error}{failure_hint(rec.error, spec.name)}" if rec.error else ""
    took = f" after {rec.duration_s:.0f}s" if rec.duration_s is not None else ""
    _note(f"{spec.name}: run {rec.run_id} {rec.state_text}{took}{why}"
          f" (pippa logs {rec.run_id} --host {spec.name})")  # fmt: skip
    raise typer.Exit(int(ExitCode.FAILURE))


def _run_group(names: list[str], recipe: str, session: str, sets: list[str]) -> LaunchResult:
    connected = [connect(n) for n in dict.fromkeys(names)]
    try:
        return launch_group([c[0] for c in connected], [c[1] for c in connected], recipe, session=session,
                            sets=sets)  # fmt: skip
    finally:
        for _, transport in connected:
            transport.close()


def resume_cmd(
    name: Annotated[str, typer.Argument(help="Run id (or session: its latest run).", show_default=False)],
    host: HostOpt = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--name", "-n", help="tmux session to resume in (default: the run's own).", show_default=False
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the log until the run ends.")
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change a recipe value for the rest of the run: key=value."),
    ] = None,
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
) -> None:
    """Continue a stopped or failed recipe run from its newest checkpoint, in the same run directory."""
    if on is not None:
        from pippa_ops.cli.move_cmd import move_and_resume

        return move_and_resume(name, on, host, set_ or [], follow, runs_dir)
    from pippa_ops.runs.tidy import checkpoints
    from pippa_ops.transport import agent_client

    where = locate_host(name, host)
    spec, transport = connect(where)
    with transport:
        run = current_run(list_runs(transport, spec.remote_dir), name)
        with agent_client.Session(transport) as agent:
            found = checkpoints(agent, spec.remote_dir, run.run_id)
        result = resume(spec, transport, run.run_id, session=session, sets=list(set_ or []))
        if found:
            typer.echo(f"resumed {result.run_ids[0]} from runs/{result.run_ids[0]}/checkpoints/{found[-1]}")
        else:
            typer.echo(f"resumed {result.run_ids[0]}: no checkpoint: restarting from step 0")
        typer.echo(f"  host:    {result.host}")
        typer.echo(f"  session: {result.session}")
        typer.echo(f"  attach:  {result.attach_hint()}")
        typer.echo(f"  logs:    {result.logs_hint()}")
        if follow:
            raise typer.Exit(follow_runs(transport, spec, list(result.run_ids), result.session))


def ps_cmd(
    host: Annotated[
        list[str] | None, typer.Option("--host", "-H", help=HOST_HELP + " Repeatable; default: every host.")
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Every run, not only the last 10 ended.")
    ] = False,
    last: Annotated[
        int | None,
        typer.Option("--last", help="Show the last N ended runs (default 10).", show_default=False),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only runs started since: 30m, 12h, 2d, 1w, or 2026-11-20.")
    ] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="Only runs in this state (running, failed, ...).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Whole run ids, always.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Runs on every host (in parallel) or one: state, duration, last step and reward."""
    from pippa_ops.cli.run_tables import render_ps, select_shown
    from pippa_ops.runs.catalog import parse_since

    since_ts = parse_since(since) if since else None
    hosts = list(dict.fromkeys(host)) if host else all_hosts()
    results = fan_out(hosts, runs_of)
    answered = {h: r for h, r in results.items() if not isinstance(r, PippaError)}
    records = merge_groups(answered)  # a run over several hosts: one record, hosts joined with "+"
    # --json lists every run unless a filter is given (scripts want them all); the table the last 10 ended.
    filtered = as_json and not (since or state or last is not None)
    shown, hidden = select_shown(records, since=since_ts, state=state, last=last,
                                 show_all=show_all or filtered)  # fmt: skip
    if as_json:
        keep = {(r.host, r.run_id) for r in shown}
        out: dict[str, Any] = {}
        for h, r in results.items():
            if isinstance(r, PippaError):
                out[h] = {"error": str(r), "exit_code": int(r.exit_code)}
            else:
                out[h] = {"runs": [x.to_json() for x in r.runs if _kept(x, keep)]}
        emit_json(out)
    else:
        errors = {h: r for h, r in results.items() if isinstance(r, PippaError)}
        empty = [h for h, r in answered.items() if not r.runs]
        render_ps(shown, errors, empty, hidden, verbose=verbose, all_ids=[r.run_id for r in records])
    # A host the user named that failed (unknown, unreachable, changed key) fails the command;
    # the others were still listed.
    failed = [r for r in results.values() if isinstance(r, PippaError)]
    if host and failed:
        for r in failed:
            _note(str(r))
        raise typer.Exit(int(failed[0].exit_code))


def _kept(rec: RunRecord, keep: set[tuple[str, str]]) -> bool:
    """Whether a host's record is among the shown ones (a run over several hosts shows as "a+b")."""
    return any(rid == rec.run_id and rec.host in host.split("+") for host, rid in keep)


def logs_cmd(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Session name or run id (short ids too); default: the newest run.", show_default=False
        ),
    ] = None,
    host: HostOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow until the run ends (Ctrl-C stops).")
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", "-n", help="Only the last N lines (then follow, with -f).")
    ] = None,
) -> None:
    """Print a run's output (the session's current run, or a run id); -f follows it."""
    run, text, spec, transport = _read_logs(name, host)
    with transport:
        skip = len(text) - len(_last_lines(text, tail)) if tail is not None else 0
        if follow and run.active:
            raise typer.Exit(follow_runs(transport, spec, [run.run_id], run.session, skip=skip))
        sys.stdout.buffer.write(text[skip:])
        sys.stdout.buffer.flush()
    if follow:  # the run had already ended: -f still exits with its code, as when following it
        raise typer.Exit(_exit_for([run.exit_code]))


def _read_logs(name: str | None, host: str | None) -> tuple[RunRecord, bytes, HostSpec, Transport]:
    """The run ``name`` means (default: the newest run) and its output, with the transport to its
    host. ONE agent request (the host's runs, the run the agent chose there by the same rule, its
    output: ``read_run``) with ``--host``, or without it when there is one host besides ``local``.
    With several, a listing of every host then a read of the one: asking them all to read would send
    the output of every host where the name fits (each rank of a run over several hosts, each host's
    ``training`` session). A listing and then a read also when the agent's choice is not the run
    (rank 0 elsewhere)."""
    listings: dict[str, HostRuns | PippaError] | None = None
    every = all_hosts() if host is None and name is not None else []
    if name is not None and every and len([h for h in every if h != LOCAL]) <= 1:  # local: no network
        wanted = validate_name("run or session", name)
        reads = fan_out(every, lambda h: _read_run_on(h, wanted))
        listings = {h: r if isinstance(r, PippaError) else r[0] for h, r in reads.items()}
        hosts, listed = locate_run(name, host, listings)
        found = reads.get(hosts[0])
        if found is not None and not isinstance(found, PippaError):
            run = current_run(found[0], name)
            if run.run_id == found[1]:
                spec, transport = connect(hosts[0])  # opens only if -f follows on it
                return run, found[2], spec, transport
    elif host is not None:
        try:
            spec, transport = connect(host)
            listed, chosen, text = read_run(transport, spec.remote_dir, name)
        except PippaError as e:
            if name is None:  # as when the newest run is looked for on every host: none there
                raise RunNotFound(f"no runs on {host} (pippa run starts one)") from e
            raise
        try:
            listings = {host: listed}
            name = name or _newest_in(listings, host)
            where = run_hosts(name, host, [host], listed)[0]  # a run over several hosts: rank 0's output
            if where == host:
                run = current_run(listed, name)
                if run.run_id != chosen:  # the agent chose otherwise (it cannot, by one rule): read it
                    text = read_all(transport, _output_log(spec, run.run_id))
                return run, text, spec, transport
        except BaseException:
            transport.close()
            raise
        transport.close()
    elif name is None:
        listings = fan_out(all_hosts(), runs_of)
        name = _newest_in(listings, host)
    hosts, listed = locate_run(name, host, listings)
    where = hosts[0]
    spec, transport = connect(where)
    try:
        runs = listed if listed.host == where else list_runs(transport, spec.remote_dir)
        run = current_run(runs, name)
        return run, read_all(transport, _output_log(spec, run.run_id)), spec, transport
    except BaseException:
        transport.close()
        raise


def _read_run_on(host: str, name: str) -> tuple[HostRuns, str | None, bytes]:
    spec, transport = connect(host)
    with transport:
        return read_run(transport, spec.remote_dir, name)


def _output_log(spec: HostSpec, run_id: str) -> str:
    return f"{spec.remote_dir.rstrip('/')}/runs/{run_id}/output.log"


def _last_lines(text: bytes, n: int | None) -> bytes:
    if n is None:
        return text
    if n <= 0:
        return b""
    lines = text.splitlines(keepends=True)
    return b"".join(lines[-n:])


def _newest_in(listings: dict[str, HostRuns | PippaError], host: str | None) -> str:
    """The id of the newest run in these listings (``pippa logs`` with no name)."""
    runs = [r for res in listings.values() if not isinstance(res, PippaError) for r in res.runs]
    if not runs:
        raise RunNotFound("no runs on " + (host or "any host") + " (pippa run starts one)")
    return max(runs, key=lambda r: (r.started or 0.0, r.run_id)).run_id


def attach_cmd(
    name: Annotated[str, typer.Argument(help="Session name (or a run id of a live session).")],
    host: HostOpt = None,
) -> None:
    """Attach this terminal to the run's tmux session (detach with C-b d; the run goes on)."""
    where = locate_host(name, host, live_session=_wants_live_session(host))
    spec = resolve(where)
    with open_transport(spec) as transport:
        session = attach_session(transport, spec, name)
    # Already in a client of the local tmux server: switch it, don't nest.
    argv = attach_argv(spec, session, switch_client=bool(os.environ.get("TMUX")))
    os.execvp(argv[0], argv)


def _wants_live_session(host: str | None) -> bool:
    """``attach`` looks for a live tmux session, except on a named SLURM host (runs are jobs there)."""
    return not (host is not None and resolve(host).scheduler == "slurm")


def stop_cmd(
    name: Annotated[str, typer.Argument(help="Session name or run id.")],
    host: HostOpt = None,
    grace: Annotated[float, typer.Option("--grace", help="Seconds to wait after Ctrl-C before killing.")] = (
        DEFAULT_GRACE_S
    ),
) -> None:
    """Interrupt a run (Ctrl-C, so a trainer can save), then kill its session after a grace period."""
    where = locate_run_hosts(name, host)
    if len(where) > 1:  # a run over several hosts: every rank, in parallel
        typer.echo(f"{'+'.join(where)}: Ctrl-C to {name} on each; waiting up to {grace:g}s", err=True)
        results = fan_out(where, lambda h: _stop_one(h, name, grace))
        for h, r in results.items():
            if isinstance(r, PippaError):
                typer.echo(f"{h}: {r}", err=True)
            else:
                final = r.after or r.before
                typer.echo(f"{r.host}: run {final.run_id} (rank {final.machine_rank}): {final.state_text}")
        if any(isinstance(r, PippaError) for r in results.values()):
            raise typer.Exit(int(ExitCode.FAILURE))
        return
    spec, transport = connect(where[0])
    with transport:
        run = current_run(list_runs(transport, spec.remote_dir), name)  # says so first when it has ended
        if not run.active:
            typer.echo(f"{spec.name}: run {run.run_id} had already ended: {run.state_text}; nothing to stop")
            return
        typer.echo(f"{spec.name}: Ctrl-C to {run.run_id} (session {run.session}); waiting up to {grace:g}s "
                   "for it to save and exit", err=True)  # fmt: skip
        result = stop(spec, transport, run.run_id, grace_s=grace)
        final = result.after or result.before
        typer.echo(f"{result.host}: run {final.run_id} (session {result.session}): {final.state_text}")
        if final.recipe is not None:
            typer.echo(f"  {_checkpoint_line(transport, spec, final.run_id)}")


def _checkpoint_line(transport: Transport, spec: HostSpec, run_id: str) -> str:
    """Where ``pippa resume`` would continue from: the run's newest checkpoint, or step 0."""
    from pippa_ops.runs.tidy import checkpoints
    from pippa_ops.transport import agent_client

    with agent_client.Session(transport) as agent:
        found = checkpoints(agent, spec.remote_dir, run_id)
    if not found:
        return f"no checkpoint: `pippa resume {run_id}` would restart from step 0"
    return f"checkpoint: runs/{run_id}/checkpoints/{found[-1]} (`pippa resume {run_id}` continues from it)"


def _stop_one(host: str, name: str, grace: float) -> StopResult:
    spec, transport = connect(host)
    with transport:
        return stop(spec, transport, name, grace_s=grace)


def recipes_cmd(as_json: JsonOpt = False) -> None:
    """The recipes this repo ships (recipes/*.toml)."""
    items = list_recipes()
    if as_json:
        emit_json([{"name": r.name, "description": r.description} for r in items])
        return
    width = max((len(r.name) for r in items), default=0)
    for r in items:
        typer.echo(f"{r.name.ljust(width)}  {r.description}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("resume")(resume_cmd)
    app.command("ps")(ps_cmd)
    app.command("logs")(logs_cmd)
    app.command("attach")(attach_cmd)
    app.command("stop")(stop_cmd)
    app.command("recipes")(recipes_cmd)
