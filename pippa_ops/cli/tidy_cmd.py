"""``pippa rm / prune``: remove ended runs' directories on their hosts, after a listing and a yes."""

from __future__ import annotations

from typing import Annotated

import typer

from pippa_ops.cli.common import HostOpt, HostsOpt, human_bytes
from pippa_ops.errors import ExitCode, PippaError, RunStillActive, UsageError
from pippa_ops.runs.records.listing import RunRecord

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before removing.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Only list what would be removed.")]


def rm_cmd(
    names: Annotated[
        list[str], typer.Argument(help="Run ids (short ids too) or sessions.", show_default=False)
    ],
    host: HostOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Remove ended runs (their directories on the host, checkpoints included); never a running run."""
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.moving.tidy import active_refusals

    found = locate(names, host)
    refused = active_refusals(list(found.values()))
    if refused:
        run_id, why = next(iter(refused.items()))
        raise RunStillActive(f"not removing run {run_id}: {why}")
    by_host: dict[str, list[RunRecord]] = {}
    for rec in found.values():
        by_host.setdefault(rec.host, []).append(rec)
    _remove(by_host, yes=yes, dry_run=dry_run)


def prune_cmd(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Runs that ended before this age: 7d, 12h, or a date.")
    ],
    host: HostsOpt = None,
    keep_checkpoints: Annotated[
        bool, typer.Option("--keep-checkpoints", help="Leave runs that have checkpoints whole.")
    ] = False,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Remove ended runs older than an age on every host (or those named); never a running run."""
    from pippa_ops.fanout import fan_out
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.locate import all_hosts
    from pippa_ops.runs.moving.tidy import has_checkpoints, prune_candidates
    from pippa_ops.runs.reading.catalog import parse_since
    from pippa_ops.runs.records.listing import list_runs

    try:
        parse_since(older_than)  # a bad age fails before any host is asked
    except UsageError as e:
        raise UsageError(str(e).replace("--since", "--older-than", 1)) from None

    def candidates(name: str) -> list[RunRecord]:
        spec, transport = connect(name)
        with transport:
            listing = list_runs(transport, spec.remote_dir)
            cutoff = parse_since(older_than, now=listing.now)  # the host's clock
            picked = prune_candidates(listing.runs, cutoff)
            if keep_checkpoints and picked:
                kept = has_checkpoints(transport, spec.remote_dir, [r.run_id for r in picked])
                picked = prune_candidates(picked, cutoff, kept)
            return picked

    results = fan_out(list(dict.fromkeys(host)) if host else all_hosts(), candidates)
    by_host: dict[str, list[RunRecord]] = {}
    for h, r in results.items():
        if isinstance(r, PippaError):
            typer.echo(f"pippa: {h}: skipped: {r}", err=True)
        elif r:
            by_host[h] = r
    if not by_host:
        typer.echo(f"nothing to prune: no ended run older than {older_than}")
        return
    _remove(by_host, yes=yes, dry_run=dry_run)


def _remove(by_host: dict[str, list[RunRecord]], *, yes: bool, dry_run: bool) -> None:
    """List what goes (measured on the hosts), ask, remove; a refusal on a host is reported."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.tidy import remove_runs

    def apply(h: str, dry: bool) -> tuple[tuple[str, ...], int, dict[str, str]]:
        spec, transport = connect(h)
        with transport:
            out = remove_runs(transport, spec.remote_dir, [r.run_id for r in by_host[h]], dry_run=dry)
        return out.removed, out.bytes, out.refused

    plan = {h: apply(h, True) for h in by_host}
    total = sum(p[1] for p in plan.values())
    count = sum(len(p[0]) for p in plan.values())
    verb = "would remove" if dry_run else "to remove"
    typer.echo(f"{verb} {count} run{'s' * (count != 1)} ({human_bytes(total)}):")
    for h, recs in by_host.items():
        for r in recs:
            why = plan[h][2].get(r.run_id)
            typer.echo(f"  {h}  {r.run_id}  {r.state_text}" + (f"  (kept: {why})" if why else ""))
    if dry_run or count == 0:
        return
    if not yes and not typer.confirm("Remove them?", default=False):
        typer.echo("nothing removed")
        raise typer.Exit(int(ExitCode.FAILURE))
    done = {h: apply(h, False) for h in by_host if plan[h][0]}
    removed, size = sum(len(d[0]) for d in done.values()), sum(d[1] for d in done.values())
    typer.echo(f"removed {removed} run{'s' * (removed != 1)} ({human_bytes(size)})")


def register(app: typer.Typer) -> None:
    app.command("rm")(rm_cmd)
    app.command("prune")(prune_cmd)
