"""``pippa recover HOST``: start again the lost runs that have attempts left (``runs.launching.recover``)."""

from __future__ import annotations

import typer

from pippa_ops.cli.common import HostArg, JsonOpt, emit_json
from pippa_ops.hosts.connect import connect
from pippa_ops.runs.launching.recover import RecoverResult, recover


def recover_cmd(host: HostArg, as_json: JsonOpt = False) -> None:
    """Resume every lost run (session gone, no exit code) that has attempts left, each in its own session."""
    spec, transport = connect(host)
    with transport:
        result = recover(spec, transport)
    if as_json:
        emit_json(
            {
                "host": result.host,
                "resumed": [
                    {
                        "run_id": r.run_id,
                        "session": r.session,
                        "attempt": r.attempt,
                        "max_attempts": r.max_attempts,
                        "checkpoint": r.checkpoint,
                    }
                    for r in result.resumed
                ],
                "skipped": [{"run_id": rid, "why": why} for rid, why in result.skipped],
            }
        )
        return
    render_recover(result)


def render_recover(result: RecoverResult) -> None:
    for r in result.resumed:
        start = f"from {r.checkpoint}" if r.checkpoint else "no checkpoint: from step 0"
        typer.echo(
            f"{result.host}: resumed {r.run_id} in session {r.session} "
            f"(attempt {r.attempt}/{r.max_attempts}, {start})"
        )
    for run_id, why in result.skipped:
        typer.echo(f"{result.host}: left {run_id} lost: {why}")
    if not result.resumed and not result.skipped:
        typer.echo(f"{result.host}: no lost runs")


def register(app: typer.Typer) -> None:
    app.command("recover")(recover_cmd)
