"""``pippa notify-test HOST``: one test alert sent from the host (its Apprise, its PIPPA_NOTIFY)."""

from __future__ import annotations

import typer

from pippa_ops.cli.common import AcceptNewOpt, HostArg, JsonOpt, emit_json
from pippa_ops.errors import ExitCode, RemoteCommandFailed, ToolMissing


def notify_test_command(host: HostArg, accept_new: AcceptNewOpt = False, json_out: JsonOpt = False) -> None:
    """Send one test alert from the host to PIPPA_NOTIFY; non-zero exit with the service's error."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.provision.alerts import notify_test

    spec, transport = connect(host, accept_new=accept_new)
    with transport:
        result = notify_test(transport)
    if json_out:
        emit_json(
            {"host": spec.name, "sent": result.sent, "configured": result.configured, "error": result.error}
        )
    if result.missing:
        raise ToolMissing(f"{spec.name}: {result.error}")
    if not result.configured:
        raise RemoteCommandFailed(
            f"{spec.name}: alerts are not configured: set PIPPA_NOTIFY in .env, then pippa up"
        )
    if not result.sent:
        raise RemoteCommandFailed(f"{spec.name}: the test alert failed: {result.error}")
    if not json_out:
        typer.echo(f"{spec.name}: test alert sent to PIPPA_NOTIFY")


def register(app: typer.Typer) -> None:
    app.command("notify-test")(notify_test_command)


__all__ = ["ExitCode", "register"]
