"""Following runs' logs onto this terminal (``run -f``, ``resume -f``, ``logs -f``): the output to
stdout as it comes, and Ctrl-C said for what it is (it stops the following, never the run)."""

from __future__ import annotations

import sys

import typer

from pippa_ops.cli.common import goes_on_line, note
from pippa_ops.errors import ExitCode
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.logs import FollowStopped, follow_many
from pippa_ops.transport.base import Transport


def write_out(chunk: bytes) -> None:
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()


def follow_runs(transport: Transport, spec: HostSpec, run_ids: list[str], session: str, skip: int = 0) -> int:
    """Stream each run's log in turn; pippa's exit code from theirs. ``skip``: bytes of the first log
    not to print (``logs --tail N -f``)."""
    try:
        return follow_many(transport, spec, run_ids, session, write_out, note, skip=skip)
    except FollowStopped as e:
        typer.echo(goes_on_line("following", e.run_id, session, spec.name), err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
