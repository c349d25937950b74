"""``pippa stop``: Ctrl-C to a run (it saves), then its session killed after a grace period."""

from __future__ import annotations

from typing import Annotated

import typer

from pippa_contract.rundir import CHECKPOINTS, RUNS
from pippa_ops.cli.common import HostOpt
from pippa_ops.errors import ExitCode, PippaError
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.launch import DEFAULT_GRACE_S, StopResult, stop
from pippa_ops.runs.moving.locate import locate_run_hosts
from pippa_ops.runs.records.listing import current_run, list_runs
from pippa_ops.transport.base import Transport


def stop_cmd(
    name: Annotated[str, typer.Argument(help="Session name or run id.")],
    host: HostOpt = None,
    grace: Annotated[
        float,
        typer.Option("--grace", help="Seconds to wait after Ctrl-C before killing (0: killed at once)."),
    ] = DEFAULT_GRACE_S,
) -> None:
    """Interrupt a run (Ctrl-C, so a trainer can save), then kill its session after a grace period."""
    where = locate_run_hosts(name, host)
    if len(where) > 1:  # a run over several hosts: every rank, in parallel
        typer.echo(f"{'+'.join(where)}: {_how(name, grace)} on each", err=True)
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
        typer.echo(f"{spec.name}: {_how(f'{run.run_id} (session {run.session})', grace)}", err=True)
        result = stop(spec, transport, run.run_id, grace_s=grace)
        final = result.after or result.before
        typer.echo(f"{result.host}: run {final.run_id} (session {result.session}): {final.state_text}")
        if final.recipe is not None:
            typer.echo(f"  {_checkpoint_line(transport, spec, final.run_id)}")


def _how(what: str, grace: float) -> str:
    """What the stop does: Ctrl-C and a wait, or (no grace) the session killed with no save."""
    if grace > 0:
        return f"Ctrl-C to {what}; waiting up to {grace:g}s for it to save and exit"
    return f"killing {what} at once (--grace 0: no Ctrl-C, so no save)"


def _checkpoint_line(transport: Transport, spec: HostSpec, run_id: str) -> str:
    """Where ``pippa resume`` would continue from: the run's newest checkpoint, or step 0."""
    from pippa_ops.runs.moving.tidy import checkpoints
    from pippa_ops.transport import agent_client

    with agent_client.Session(transport) as agent:
        found = checkpoints(agent, spec.remote_dir, run_id)
    if not found:
        return f"no checkpoint: `pippa resume {run_id}` would restart from step 0"
    where = f"{RUNS}/{run_id}/{CHECKPOINTS}/{found[-1]}"
    return f"checkpoint: {where} (`pippa resume {run_id}` continues from it)"


def _stop_one(host: str, name: str, grace: float) -> StopResult:
    spec, transport = connect(host)
    with transport:
        return stop(spec, transport, name, grace_s=grace)


def register(app: typer.Typer) -> None:
    app.command("stop")(stop_cmd)
