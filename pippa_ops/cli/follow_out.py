"""Following runs' logs onto this terminal (``run -f``, ``resume -f``, ``logs -f``): the output to
stdout as it comes, and Ctrl-C said for what it is (it stops the following, never the run)."""

from __future__ import annotations

import typer

from pippa_ops.cli.common import goes_on_line, note
from pippa_ops.cli.hostout import HostOutput
from pippa_ops.errors import ExitCode
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.reading.logs import FollowStopped, follow_many
from pippa_ops.transport.base import Transport


def follow_runs(
    transport: Transport, spec: HostSpec, run_ids: list[str], session: str, skip: int = 0, raw: bool = False
) -> int:
    """Stream each run's log in turn; pippa's exit code from theirs. ``skip``: bytes of the first log
    not to print (``logs --tail N -f``); ``raw``: the log's bytes, escape sequences and secrets as
    they are (``HostOutput``)."""
    out = HostOutput(raw)
    try:
        return follow_many(transport, spec, run_ids, session, out.write, note, skip=skip, redact=not raw)
    except FollowStopped as e:
        typer.echo(goes_on_line("following", e.run_id, session, spec.name), err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    finally:
        out.close()
