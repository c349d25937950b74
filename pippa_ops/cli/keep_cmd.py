"""``pippa keep HOST``: call off the stop command the host's watcher has armed (``stop_when``), the one
command its alert names."""

from __future__ import annotations

import time

import typer

from pippa_ops.cli.common import HostArg, JsonOpt, emit_json


def keep_command(host: HostArg, json_out: JsonOpt = False) -> None:
    """Cancel the host's armed stop command (its alert said when it runs); the host keeps running."""
    from pippa_contract import verbs
    from pippa_contract.hostdirs import ALERTS_DIR, STOP_CANCEL
    from pippa_ops.hosts.connect import connect
    from pippa_ops.provision.alerts import host_status
    from pippa_ops.transport import agent_client

    spec, transport = connect(host)
    with transport:
        status = host_status(transport) or {}
        stop = status.get("stop") if isinstance(status.get("stop"), dict) else {}
        armed = stop.get("armed") if isinstance(stop, dict) else None
        if isinstance(armed, dict):
            path = f"{ALERTS_DIR}/{STOP_CANCEL}"
            verbs.write_file(agent_client.Once(transport), path, f"{time.time():.0f}\n")
    if json_out:
        emit_json({"host": spec.name, "cancelled": isinstance(armed, dict)})
        return
    if isinstance(armed, dict):
        typer.echo(f"{spec.name}: the stop armed by {armed.get('trigger')} is called off (an alert says so)")
    else:
        typer.echo(f"{spec.name}: no stop is armed")


def register(app: typer.Typer) -> None:
    app.command("keep")(keep_command)
