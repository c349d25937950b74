"""``pippa resume RUN --on HOST``: the move (``runs.moving.move``) and its report."""

from __future__ import annotations

from pathlib import Path

import typer

from pippa_ops.cli.start_out import report_start
from pippa_ops.errors import UsageError
from pippa_ops.hosts.connect import connect
from pippa_ops.repo import pulled_runs_dir
from pippa_ops.runs.launching.schedulers import scheduler_for
from pippa_ops.runs.moving.move import move_run
from pippa_ops.runs.moving.whole import run_whole


def move_and_resume(
    name: str,
    to_host: str,
    host: str | None,
    sets: list[str],
    follow: bool,
    runs_dir: Path | None,
    *,
    wait: float | None = None,
    no_wait: bool = False,
) -> None:
    """Move, then watch the start on the new host as ``run`` and ``resume`` do (not after
    ``--no-wait``): a start that fails there exits non-zero with its reason line."""
    if sets:
        raise UsageError("--on moves the run as it was: resume it there with --set afterwards")
    if follow:
        raise UsageError("--on does not follow: pippa logs RUN --host HOST -f afterwards")
    root = pulled_runs_dir(runs_dir)
    # in a process of its own that a kill -9 of this one leaves to finish: moved and resumed, or not moved
    r = run_whole(lambda: move_run(name, to_host, host=host, runs_root=root))
    src = r.from_host if r.source == "host" else f"the copy in {r.source}"
    typer.echo(
        f"moved {r.run_id} from {src} to {r.to_host}: {r.files} files, {r.bytes / 1e6:.1f} MB "
        f"in {r.elapsed_s:.1f}s, checksummed"
    )
    typer.echo(f"resumed {r.run_id} on {r.to_host}")
    typer.echo(f"  session: {r.launch.session}")
    typer.echo(f"  logs:    {r.launch.logs_hint()}")
    if no_wait:
        return
    spec, transport = connect(r.to_host)
    with transport:
        if scheduler_for(spec).starts_at_once:  # a queued job starts later: nothing to watch yet
            report_start(transport, spec, r.run_id, wait, recipe=True, quiet=False)
