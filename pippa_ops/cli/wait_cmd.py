"""``pippa wait``: block until runs end and exit with their status; ``--notify`` tells the user (bell,
a line, a desktop notification). ``pippa run --notify`` starts the same watcher in the background."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pippa_ops.cli.common import HostOpt, JsonOpt, RunsDirOpt, emit_json, goes_on_line


def _note(message: str) -> None:
    typer.echo(f"pippa: {message}", err=True)


def wait_cmd(
    names: Annotated[
        list[str], typer.Argument(help="Run ids (or sessions: their current run).", show_default=False)
    ],
    host: HostOpt = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Give up after this many seconds (exit 124).", show_default=False),
    ] = None,
    notify: Annotated[
        bool,
        typer.Option("--notify", help="As each run ends: terminal bell, a line, a desktop notification."),
    ] = False,
    log: Annotated[
        str | None,
        typer.Option("--log", hidden=True, help="Write notes (reconnects) to this file, not stderr."),
    ] = None,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = None,
) -> None:
    """Wait until runs end (riding out dropped connections); exit with their status (0: all exited 0)."""
    from pippa_ops import notify as notices
    from pippa_ops.errors import UsageError
    from pippa_ops.runs.reading.wait import ended_line, exit_status, wait_runs
    from pippa_ops.runs.records.listing import RunRecord

    if timeout is not None and timeout < 0:
        raise UsageError("--timeout must be >= 0 seconds")
    records = _located(names, host, runs_dir)
    status = None
    if sys.stderr.isatty() and not as_json and log is None:
        from pippa_ops.cli.wait_status import StatusLine

        status = StatusLine(records, sys.stderr).start()
    note = _log_note(log) if log is not None else status.note if status is not None else _note
    if log is not None:
        note("watching " + ", ".join(f"{r.run_id} on {r.host}" for r in records.values()))

    def on_end(rec: RunRecord) -> None:
        if status is not None:
            status.clear()
        if notify:
            notices.run_ended(ended_line(rec))
        elif not as_json:
            typer.echo(ended_line(rec))

    ended: set[str] = set()

    def on_end_seen(rec: RunRecord) -> None:
        ended.add(rec.run_id)
        on_end(rec)

    def say(line: str) -> None:
        if status is not None:
            status.clear()
        if log is not None:
            note(line)  # the background watcher's log
        if notify:
            notices.run_ended(line)  # the bell, the line, the desktop and PIPPA_NOTIFY
            return
        typer.echo(line, err=True)
        from pippa_ops.alerts.local import send

        error = send(line)  # a move is alerted where PIPPA_NOTIFY is set, --notify or not
        if error is not None:
            typer.echo(f"pippa: alert to PIPPA_NOTIFY failed: {error}", err=True)

    def moved(rec: RunRecord, why: str) -> RunRecord:
        from pippa_ops.repo import pulled_runs_dir
        from pippa_ops.runs.moving.failover import fail_over

        new = fail_over(rec, why, pulled_runs_dir(runs_dir), say)  # a lost host: from the pulled copy
        if status is not None:
            status.moved(new)  # the line follows the live copy, never the old host's
        return new

    import threading

    from pippa_ops.runs.moving.failover import after_s, due
    from pippa_ops.runs.moving.locate import watch_return

    done = threading.Event()

    def left_lost(old: RunRecord, new: RunRecord) -> None:  # the old host may come back with it going
        watch_return(old.host, new.host, new.run_id, done, say)

    try:
        results = wait_runs(
            records,
            timeout_s=timeout,
            on_end=on_end_seen,
            note=note,
            failover=(due, moved, after_s()),
            on_left_lost=left_lost,
        )
        done.set()
    except KeyboardInterrupt:  # Ctrl-C stops the waiting, never the runs: say so, one line a run
        if status is not None:
            status.stop()
        for rec in records.values():
            if rec.run_id not in ended:
                typer.echo(goes_on_line("waiting", rec.run_id, rec.session, rec.host), err=True)
        sys.stderr.flush()
        os._exit(130)  # the watcher threads sit in blocking reads: the process ends without them
    if status is not None:
        status.stop()
    for r in results.values():
        if not isinstance(r, RunRecord):
            note(str(r))
    if as_json:
        out: dict[str, Any] = {
            name: r.to_json()
            if isinstance(r, RunRecord)
            else {"error": str(r), "exit_code": int(r.exit_code)}
            for name, r in results.items()
        }
        emit_json(out)
    raise typer.Exit(exit_status(results))


def _located(names: list[str], host: str | None, runs_dir: Path | None) -> dict[str, Any]:
    """Each name's run; with its host not answering, a ``--failover`` run as the laptop's pulled copy
    tells it (runs.moving.failover.from_pulled_copy): the wait then moves it once the outage lasts."""
    from pippa_ops.errors import HostUnreachable, RunNotFound
    from pippa_ops.repo import pulled_runs_dir
    from pippa_ops.runs.moving.failover import from_pulled_copy
    from pippa_ops.runs.moving.locate import locate

    try:
        return dict(locate(names, host))
    except (HostUnreachable, RunNotFound) as e:
        root = pulled_runs_dir(runs_dir)
        copies = {n: from_pulled_copy(n, root) for n in names}
        if any(c is None or (host is not None and c.host != host) for c in copies.values()):
            raise
        if isinstance(e, RunNotFound) and "not reachable" not in str(e):
            raise  # every host answered: the run is nowhere, whatever a copy here says
        return copies


def _log_note(path: str) -> Callable[[str], None]:
    """Notes appended to a file, each with its time: a background watcher's reconnects stay out of
    the terminal it shares with the user."""

    def note(message: str) -> None:
        import time

        with open(path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    return note


def register(app: typer.Typer) -> None:
    app.command("wait")(wait_cmd)
