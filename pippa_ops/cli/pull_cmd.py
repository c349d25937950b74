"""``pippa pull`` and ``pippa runs``: runs' records onto this machine, and every run in one list.

The work is in ``runs.moving.pull`` (the incremental transfer), ``runs.reading.catalog`` (listing
hosts and pulled copies, filters) and ``runs.reading.wandb_api``; this module parses options and draws
tables.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pippa_ops.cli.common import (
    HostOpt,
    HostsOpt,
    JsonOpt,
    RunsDirOpt,
    SinceOpt,
    StateOpt,
    VerboseOpt,
    emit_json,
    human_bytes,
)
from pippa_ops.errors import PippaError, UsageError
from pippa_ops.repo import project, pulled_runs_dir

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from pippa_ops.runs.moving.pull import PullResult
    from pippa_ops.runs.reading.catalog import RunInfo
    from pippa_ops.runs.reading.wandb_api import WandbRun

PROGRESS_MIN_BYTES = 1 << 20  # a bar only for transfers worth watching


def _note(message: str) -> None:
    typer.echo(f"pippa: {message}", err=True)


class _Bar:
    """A rich progress bar on stderr, opened only once a transfer is big enough to watch."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled = label, enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_MIN_BYTES:
            return
        if self._progress is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            from pippa_ops.cli.common import err_console

            self._progress = Progress(
                "{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=err_console(),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=total)
        assert self._task is not None
        self._progress.update(self._task, completed=done)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def render_pull(r: PullResult) -> None:
    parts = [f"{len(r.new)} new", f"{len(r.grown)} grown", f"{r.unchanged} unchanged"]
    typer.echo(f"{r.host} {r.run_id} -> {r.path}: {', '.join(parts)}, {human_bytes(r.received)}")
    if r.checkpoint:
        typer.echo(f"  checkpoint: {r.checkpoint}")
    elif r.checkpoints:
        typer.echo(f"  checkpoints on the host: {', '.join(r.checkpoints)} (--checkpoints pulls the newest)")
    for rel in r.changed:
        typer.echo(f"  {rel}: replaced on the host while pulling (a resume?); pull again")


def pull_cmd(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Run ids (or sessions: their current run).", show_default=False),
    ] = None,
    host: HostOpt = None,
    checkpoints: Annotated[
        bool, typer.Option("--checkpoints", help="Also pull the newest checkpoint.")
    ] = False,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint", help="Also pull this checkpoint (checkpoint-N or N).", show_default=False
        ),
    ] = None,
    wandb_sync: Annotated[
        bool,
        typer.Option(
            "--wandb-sync", help="First upload the run's offline W&B runs (`wandb sync` on the host)."
        ),
    ] = False,
    max_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-bytes",
            min=1,
            show_default=False,
            help="The most one run's pull may bring (default 100 GiB); a host announcing more is refused.",
        ),
    ] = None,
    runs_dir: RunsDirOpt = None,
    from_dir: Annotated[
        Path | None,
        typer.Option(
            "--from",
            show_default=False,
            help="A plain directory holding runs/<run-id>/ (a bucket's copy of an exported task).",
        ),
    ] = None,
    as_name: Annotated[
        str, typer.Option("--as", help="With --from: the host name the copies go under.")
    ] = "task",
    as_json: JsonOpt = False,
) -> None:
    """Bring runs' records (run.json, metrics, log, evals; --checkpoints) into runs/<host>/<run-id>/ here."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.moving.pull import pull_run
    from pippa_ops.runs.moving.pull import wandb_sync as sync_wandb

    root = pulled_runs_dir(runs_dir)
    if not as_json:
        typer.echo(f"writing into {root}" if runs_dir is not None else project().line("writing into", root))
    which = checkpoint if checkpoint else ("latest" if checkpoints else None)
    if from_dir is not None:
        from pippa_ops.runs.moving.pull import pull_from_dir

        results = pull_from_dir(from_dir, as_name, root, list(names or []), checkpoint=which)
        if as_json:
            emit_json([r.to_json() for r in results])
        for r in [] if as_json else results:
            render_pull(r)
        return
    if not names:
        raise UsageError("name the runs to pull (or --from DIR)")
    records = locate(names, host)
    by_host: dict[str, list[str]] = {}
    for rec in records.values():
        by_host.setdefault(rec.host, []).append(rec.run_id)
    done: list[dict[str, Any]] = []
    failed: list[PippaError] = []
    for h, run_ids in by_host.items():
        spec, transport = connect(h)
        with transport:
            for run_id in run_ids:
                bar = _Bar(f"{h} {run_id}", enabled=not as_json and sys.stderr.isatty())
                try:
                    synced = sync_wandb(transport, spec, run_id) if wandb_sync else []
                    cap = {} if max_bytes is None else {"max_bytes": max_bytes}
                    result = pull_run(transport, spec, run_id, root, checkpoint=which, progress=bar, **cap)
                except PippaError as e:
                    failed.append(e)
                    _note(str(e))
                    continue
                finally:
                    bar.close()
                done.append({**result.to_json(), "wandb_synced": synced})
                if not as_json:
                    render_pull(result)
                    for name in synced:
                        typer.echo(f"  W&B: uploaded {name}")
    if as_json:
        emit_json(done)
    if failed:
        raise typer.Exit(int(failed[0].exit_code))


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else f"{v:{fmt}}"


def _eval_text(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "-"
    for key in ("eval/accuracy", "mbpp_eval/pass_rate", "mbpp_eval/pass_at_1"):
        if isinstance(ev.get(key), int | float):
            return f"{ev[key]:.3f}@{ev.get('step', '?')}"
    return "-"


def _wandb_text(w: dict[str, Any] | None) -> str:
    if not w:
        return "-"
    return str(w.get("url") or f"{w.get('mode', 'offline')}:{w.get('id')}")


def render_runs(
    infos: list[RunInfo], errors: dict[str, PippaError], verbose: bool = False, sort: str = "started"
) -> None:
    from pippa_ops.cli import run_tables

    if not infos and not errors:
        typer.echo("no runs (pippa run starts one; pippa pull brings one here)")
        return
    run_tables.render_runs(
        infos, errors, verbose=verbose, eval_text=_eval_text, wandb_text=_wandb_text, sort=sort
    )


def render_wandb(project: str, runs: list[WandbRun]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    shown = [
        k
        for k in ("reward/mean", "eval/accuracy", "mbpp_eval/pass_rate")
        if any(k in r.summary for r in runs)
    ]
    table = Table(box=None, header_style="bold", title=f"W&B {project}", title_justify="left")
    for col in ("NAME", "ID", "STATE", "CREATED", *(k.upper() for k in shown), "PIPPA RUN", "URL"):
        table.add_column(col, no_wrap=col != "URL")
    for r in runs:
        metrics = [_f(r.summary[k]) if isinstance(r.summary.get(k), int | float) else "-" for k in shown]
        table.add_row(
            escape(r.name),
            escape(r.id),
            escape(r.state),
            escape(r.created or "-"),
            *metrics,
            r.pippa_run or "-",
            escape(r.url or "-"),
        )
    if not runs:
        typer.echo(f"W&B {project}: no runs")
        return
    Console(width=None if sys.stdout.isatty() else 260, highlight=False).print(table)


def runs_cmd(
    host: HostsOpt = None,
    recipe: Annotated[
        str | None, typer.Option("--recipe", help="Only runs of this recipe (or command); globs: 'overfit*'.")
    ] = None,
    since: SinceOpt = None,
    state: StateOpt = None,
    sort: Annotated[
        str,
        typer.Option("--sort", help="started (oldest first), reward, best, steps, duration (largest first)."),
    ] = "started",
    pulled: Annotated[bool, typer.Option("--pulled", help="Only the pulled copies; ask no host.")] = False,
    wandb: Annotated[
        str | None,
        typer.Option(
            "--wandb",
            help="Also list this W&B project's runs (ENTITY/PROJECT; needs WANDB_API_KEY).",
            show_default=False,
        ),
    ] = None,
    runs_dir: RunsDirOpt = None,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Every run on the hosts and pulled here: recipe, state, steps, final/best reward, eval, W&B link."""
    from pippa_ops.runs.reading.catalog import overview, parse_since, select

    since_ts = parse_since(since) if since else None
    hosts = list(dict.fromkeys(host)) if host else None
    infos, errors = overview(hosts, pulled_runs_dir(runs_dir), pulled_only=pulled)
    infos = select(infos, recipe=recipe, since=since_ts, state=state, sort=sort)
    wandb_part: dict[str, Any] | None = None
    wandb_error: PippaError | None = None
    w_runs: list[WandbRun] = []
    if wandb is not None:
        from pippa_ops.runs.reading.wandb_api import list_runs as wandb_runs

        ids = {str(i.wandb["id"]): i.run_id for i in infos if i.wandb and i.wandb.get("id")}
        try:
            w_runs = wandb_runs(wandb, pippa_ids=ids)
            wandb_part = {"project": wandb, "runs": [r.to_json() for r in w_runs]}
        except PippaError as err:
            wandb_error = err
            wandb_part = {"project": wandb, "error": str(err)}
    if as_json:
        out: dict[str, Any] = {
            "runs": [i.to_json() for i in infos],
            "errors": {h: {"error": str(e), "exit_code": int(e.exit_code)} for h, e in errors.items()},
        }
        if wandb_part is not None:
            out["wandb"] = wandb_part
        emit_json(out)
    else:
        render_runs(infos, errors, verbose, sort)
        if wandb is not None and wandb_error is None:
            typer.echo("")
            render_wandb(wandb, w_runs)
    if wandb_error is not None:
        _note(str(wandb_error))
    failed = list(errors.values()) if hosts else []
    if wandb_error is not None:
        raise typer.Exit(int(wandb_error.exit_code))
    if failed:
        for e in failed:
            _note(str(e))
        raise typer.Exit(int(failed[0].exit_code))


def register(app: typer.Typer) -> None:
    app.command("pull")(pull_cmd)
    app.command("runs")(runs_cmd)
