"""``pippa logs / attach``: a run's output (``runs.reading.logs`` finds it), or its terminal."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from pippa_ops.cli.common import FollowOpt, HostOpt, RawOpt
from pippa_ops.cli.follow_out import follow_runs
from pippa_ops.cli.hostout import HostOutput
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import resolve
from pippa_ops.runs.launching.attach import attach_session
from pippa_ops.runs.launching.launch import attach_argv
from pippa_ops.runs.launching.schedulers import scheduler_for
from pippa_ops.runs.moving.locate import locate_host
from pippa_ops.runs.reading.logs import exit_for, last_lines, read_logs


def logs_cmd(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Session name or run id (short ids too); default: the newest run.", show_default=False
        ),
    ] = None,
    host: HostOpt = None,
    follow: FollowOpt = False,
    tail: Annotated[
        int | None, typer.Option("--tail", "-n", help="Only the last N lines (then follow, with -f).")
    ] = None,
    raw: RawOpt = False,
) -> None:
    """Print a run's output (the session's current run, or a run id); -f follows it."""
    run, text, spec, transport = read_logs(name, host, redact=not raw)
    with transport:
        skip = len(text) - len(last_lines(text, tail)) if tail is not None else 0
        if follow and run.active:
            raise typer.Exit(follow_runs(transport, spec, [run.run_id], run.session, skip=skip, raw=raw))
        out = HostOutput(raw)
        out.write(text[skip:])
        out.close()
    if follow:  # the run had already ended: -f still exits with its code, as when following it
        raise typer.Exit(exit_for([run.exit_code]))


def attach_cmd(
    name: Annotated[str, typer.Argument(help="Session name (or a run id of a live session).")],
    host: HostOpt = None,
) -> None:
    """Attach this terminal to the run's tmux session (detach with C-b d; the run goes on)."""
    # a live session is looked for, except on a named host without terminals (SLURM: batch jobs)
    live = host is None or scheduler_for(resolve(host)).has_terminal
    where = locate_host(name, host, live_session=live)
    spec = resolve(where)
    with open_transport(spec) as transport:
        session = attach_session(transport, spec, name)
    # Already in a client of the local tmux server: switch it, don't nest.
    argv = attach_argv(spec, session, switch_client=bool(os.environ.get("TMUX")))
    os.execvp(argv[0], argv)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_cmd)
    app.command("attach")(attach_cmd)
