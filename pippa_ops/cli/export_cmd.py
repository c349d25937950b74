"""``pippa export RECIPE --to skypilot|sbatch``: parse, call ``runs.launching.export``, write the file,
exit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from pippa_ops.cli.common import SetOpt
from pippa_ops.cli.complete import recipe_names


def export_cmd(
    recipe: Annotated[str, typer.Argument(help="The recipe to export.", autocompletion=recipe_names)],
    to: Annotated[str, typer.Option("--to", help="skypilot (a task YAML) or sbatch (a SLURM job script).")],
    set_: SetOpt = None,
    nodes: Annotated[int, typer.Option("--nodes", help="Nodes (machines) for the run.")] = 1,
    gpus: Annotated[str, typer.Option("--gpus", help="Accelerators per node, SkyPilot's form.")] = "H100:8",
    bucket: Annotated[
        str | None,
        typer.Option(
            "--bucket",
            help="skypilot: the bucket the run directory lives in, e.g. s3://b/pippa.",
            show_default=False,
        ),
    ] = None,
    mount: Annotated[
        str, typer.Option("--mount", help="skypilot: where the bucket is mounted.")
    ] = "/pippa-runs",
    retry: Annotated[
        int,
        typer.Option(
            "--retry", help="Restarts after a user failure (max_restarts_on_errors; sbatch: requeues)."
        ),
    ] = 0,
    remote_dir: Annotated[
        str, typer.Option("--remote-dir", help="sbatch: the project's directory on the cluster.")
    ] = "~/pippa",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write here (default: standard output).", show_default=False),
    ] = None,
) -> None:
    """A recipe's run as a SkyPilot task YAML or a SLURM job script, for an engine pippa does not drive."""
    from pippa_ops.runs.launching.export import export

    text = export(
        recipe,
        to,
        sets=set_ or [],
        nodes=nodes,
        accelerators=gpus,
        bucket=bucket,
        mount=mount,
        retries=retry,
        remote_dir=remote_dir,
    )
    if output is None:
        typer.echo(text, nl=False)
        return
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, output)  # never a half-written file
    typer.echo(f"wrote {output}", err=True)


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
