"""``pippa ps``: every host's runs (in parallel) or one's, as a table or --json."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pippa_ops.cli.common import HostsOpt, JsonOpt, SinceOpt, StateOpt, VerboseOpt, emit_json, note
from pippa_ops.errors import PippaError, UsageError
from pippa_ops.runs.moving.locate import all_hosts, every_listing
from pippa_ops.runs.records.listing import RunRecord, merge_groups


def ps_cmd(
    host: HostsOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Every run, not only the last 10 ended.")
    ] = False,
    last: Annotated[
        int | None,
        typer.Option("--last", help="Show the last N ended runs (default 10).", show_default=False),
    ] = None,
    since: SinceOpt = None,
    state: StateOpt = None,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Runs on every host (in parallel) or one: state, duration, last step and reward."""
    from pippa_ops.cli.run_tables import render_ps, select_shown
    from pippa_ops.runs.reading.catalog import parse_since

    since_ts = parse_since(since) if since else None
    hosts = list(dict.fromkeys(host)) if host else all_hosts()
    results = every_listing(hosts)  # a stale copy of a run that moved on is ended here (runs.moving.stale)
    bad_entry = next((r for r in results.values() if isinstance(r, UsageError)), None)
    if bad_entry is not None:  # an invalid inventory entry: one line, as without --host
        raise bad_entry
    answered = {h: r for h, r in results.items() if not isinstance(r, PippaError)}
    records = merge_groups(answered)  # a run over several hosts: one record, hosts joined with "+"
    # --json lists every run unless a filter is given (scripts want them all); the table the last 10 ended.
    filtered = as_json and not (since or state or last is not None)
    shown, hidden = select_shown(
        records, since=since_ts, state=state, last=last, show_all=show_all or filtered
    )
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
            note(str(r))
        raise typer.Exit(int(failed[0].exit_code))


def _kept(rec: RunRecord, keep: set[tuple[str, str]]) -> bool:
    """Whether a host's record is among the shown ones (a run over several hosts shows as "a+b")."""
    return any(rid == rec.run_id and rec.host in host.split("+") for host, rid in keep)


def register(app: typer.Typer) -> None:
    app.command("ps")(ps_cmd)
