"""``pippa compare``: runs side by side: the config keys that differ, a summary line each, and their
curves on one plot per metric, in the terminal (plotext) and with ``--png`` as an image (matplotlib)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from pippa_ops.cli.common import HostOpt, JsonOpt, RunsDirOpt, emit_json
from pippa_ops.errors import UsageError
from pippa_ops.repo import pulled_runs_dir


def _value(v: Any) -> str:
    text = "-" if v is None else str(v)
    return text if len(text) <= 40 else text[:39] + "…"


def compare_cmd(
    names: Annotated[list[str], typer.Argument(help="Run ids (pulled or on a host).", show_default=False)],
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric", "-m", help="Metric to plot (repeatable). Default: reward/mean.", show_default=False
        ),
    ] = None,
    smooth: Annotated[
        float,
        typer.Option("--smooth", help="EMA weight in [0, 1) for the curves (TensorBoard's; 0.6 is usual)."),
    ] = 0.0,
    png: Annotated[
        Path | None, typer.Option("--png", help="Also write the plot to this PNG file.", show_default=False)
    ] = None,
    host: HostOpt = None,
    runs_dir: RunsDirOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Also the platform facts each trainer detected (platform.facts.*).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side: config keys that differ, final/best reward, curves (terminal and --png)."""
    from pippa_ops.runs.reading.compare import (
        DEFAULT_METRICS,
        check_metrics,
        differing_config,
        legend_labels,
        load_runs,
        metric_points,
    )
    from pippa_ops.runs.reading.curves import smooth as smoothed

    if not 0.0 <= smooth < 1.0:
        raise UsageError(f"--smooth {smooth:g}: the EMA weight must be in [0, 1)")
    metrics = list(dict.fromkeys(metric or DEFAULT_METRICS))
    runs = load_runs(names, pulled_runs_dir(runs_dir), host)
    check_metrics(runs, metrics)
    diff = differing_config(runs, with_facts=show_all)
    series = {m: metric_points(runs, m) for m in metrics}
    if png is not None:
        from pippa_ops.runs.reading.plots import save_png

        labels = legend_labels(runs)
        named = {m: {labels[run]: pts for run, pts in by_run.items()} for m, by_run in series.items()}
        save_png(png, named, smoothing=smooth, title=" vs ".join(labels[r.run_id] for r in runs))
    if as_json:
        out: dict[str, Any] = {
            "runs": [
                {"run_id": r.run_id, "host": r.host, "source": r.source, "where": r.where, **r.summary()}
                for r in runs
            ],
            "config_diff": diff,
            "metrics": {
                m: {run: [list(p) for p in pts] for run, pts in s.items()} for m, s in series.items()
            },
            "smoothing": smooth,
            "png": str(png) if png else None,
        }
        if smooth > 0:
            out["smoothed"] = {
                m: {run: [list(p) for p in smoothed(pts, smooth)] for run, pts in s.items()}
                for m, s in series.items()
            }
        emit_json(out)
        return
    from pippa_ops.runs.records.cost import goodput, money

    for r in runs:
        s = r.summary()
        ev = ", ".join(
            f"{k} {v:.3f}"
            for k, v in (s["final_eval"] or {}).items()
            if k.endswith(("accuracy", "pass_rate"))
        )
        typer.echo(
            f"{r.run_id}  {r.host} ({r.source})  steps {_value(s['steps'])}  reward {_fmt(s['final_reward'])}"
            f"  best {_fmt(s['best_reward'])}"
            + (f"  {ev}" if ev else "")
            + (f"  {s['end']}" if s["end"] else "")
            + (f"  cost {money(s['cost'], s['currency'])}" if s["cost"] is not None else "")
            + (f" ({goodput(s['ledger'])})" if s["ledger"] else "")
            + (f"  {money(s['per_eval_point'], s['currency'])}/eval point" if s["per_eval_point"] else "")
        )
    typer.echo("")
    if diff:
        typer.echo("config (only the keys that differ):")
        width = max(len(k) for k in diff)
        typer.echo("  " + " " * width + "  " + "  ".join(f"{r.run_id:<28}" for r in runs))
        for key, values in diff.items():
            typer.echo(f"  {key:<{width}}  " + "  ".join(f"{_value(values[r.run_id]):<28}" for r in runs))
    else:
        typer.echo("config: identical")
    columns = shutil.get_terminal_size((120, 40)).columns
    color = sys.stdout.isatty()
    from pippa_ops.runs.reading.plots import terminal_plot

    for m in metrics:
        typer.echo("")
        typer.echo(
            terminal_plot(m, series[m], smoothing=smooth, width=min(columns, 140), height=20, color=color)
        )
    if png is not None:
        typer.echo(f"wrote {png}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
