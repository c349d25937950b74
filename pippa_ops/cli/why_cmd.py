"""``pippa why RUN``: each attempt's failure class, what the retry did, the deciding lines, the stuck
frames of a stall, and the next command (``runs.reading.why``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pippa_ops.cli.common import HostOpt, JsonOpt, RunsDirOpt, emit_json
from pippa_ops.errors import UsageError
from pippa_ops.runs.moving.locate import locate
from pippa_ops.runs.reading.why import explain, render
from pippa_ops.runs.records.listing import RunRecord

RunArg = Annotated[str, typer.Argument(help="Run id, short id or session name.", show_default=False)]


def why_cmd(
    name: RunArg,
    host: HostOpt = None,
    pulled: Annotated[
        bool, typer.Option("--pulled", help="Read the pulled copy (pippa pull), ask no host.")
    ] = False,
    runs_dir: RunsDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Why a run's attempts ended: class, retry, deciding log lines, stuck frames, next command."""
    rec = _pulled(name, host, runs_dir) if pulled or runs_dir is not None else locate([name], host)[name]
    tail = None
    if rec.job_id is not None and rec.attempts_doc is None and not rec.active:  # a SLURM job: its output
        from pippa_ops.runs.reading.logs import last_lines, read_logs

        _rec, data, _spec, transport = read_logs(rec.run_id, rec.host)
        transport.close()
        text = last_lines(data, 200).decode(errors="replace").splitlines()
        starts = [i for i, ln in enumerate(text) if ln.startswith("pippa: attempt ") and "requeued" in ln]
        tail = text[starts[-1] + 1 :] if starts else text
    why = explain(rec, tail)
    if as_json:
        emit_json(why.to_json())
        return
    for line in render(why, rec.attempts_of or rec.max_attempts):
        typer.echo(line)


def _pulled(name: str, host: str | None, runs_dir: Path | None) -> RunRecord:
    """The pulled copy of run ``name`` (``<runs-dir>/<host>/<run-id>``), as ``runs --pulled`` reads it."""
    from pippa_ops.repo import pulled_runs_dir
    from pippa_ops.runs.reading.catalog import pulled_infos

    found = [
        i.record
        for i in pulled_infos(pulled_runs_dir(runs_dir))
        if name in (i.record.run_id, i.record.session) and host in (None, i.host)
    ]
    if not found:
        raise UsageError(f"no pulled copy of {name}{f' from {host}' if host else ''} (pippa pull brings one)")
    return found[-1]


def register(app: typer.Typer) -> None:
    app.command("why")(why_cmd)
