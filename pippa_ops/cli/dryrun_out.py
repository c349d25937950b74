"""How ``pippa run --dry-run`` prints its plan (runs.launching.dryrun): the script, every setting, the
checks."""

from __future__ import annotations

import json

import typer

from pippa_ops.cli.common import emit_json
from pippa_ops.errors import BadSetting
from pippa_ops.hosts.inventory import resolve
from pippa_ops.runs.launching.dryrun import DryRun, dry_run
from pippa_ops.runs.launching.restart import RestartFlags


def dry_run_cmd(
    host: str,
    names: list[str],
    cmd: str | None,
    sets: list[str],
    nodes: int | None,
    restart: RestartFlags,
    hosts: str | None,
    as_json: bool,
) -> None:
    """``pippa run ... --dry-run``: the plan of ``runs.launching.dryrun``, printed; exit 0."""
    if hosts is not None:
        raise BadSetting("--dry-run shows one host's run (--host); not --hosts yet")
    plan = dry_run(resolve(host), recipes=names, command=cmd, sets=sets, nodes=nodes, restart=restart)
    if as_json:
        emit_json(plan.to_json())
    else:
        render_dry_run(plan)


def render_dry_run(plan: DryRun) -> None:
    typer.echo(f"dry run: nothing was started, synced or written on {plan.host} ({plan.scheduler})")
    for run in plan.runs:
        what = f"recipe {run.recipe}" if run.recipe else "--cmd"
        where = f"{plan.remote_dir}/runs/{run.run_id}/{run.file}"
        typer.echo(f"\n=== {where} ({what}; a real run draws a new run id)")
        typer.echo(run.script, nl=False)
        typer.echo(f"\n=== the job's command line (run.json's \"command\")\n{run.command}")
        if run.settings_note:
            typer.echo(f"\n=== recipe {run.recipe}: settings not listed: {run.settings_note}")
        if run.settings:
            typer.echo(f"\n=== recipe {run.recipe}: every setting, its value and where it came from")
            typer.echo("(resolved here for the CPU platform; the host's platform preset applies on the host)")
            width = max(len(s["key"]) for s in run.settings)
            for s in run.settings:
                typer.echo(f"{s['key']:<{width}} = {json.dumps(s['value'])}   ({s['source']})")
    typer.echo("\n=== what a real run checks on the host first")
    for line in plan.checks:
        typer.echo(f"- {line}")
