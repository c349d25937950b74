"""``pippa why RUN``: each attempt's failure class, what the retry did, the deciding lines, the stuck
frames of a stall, and the next command (``runs.why``)."""

from __future__ import annotations

from typing import Annotated

import typer

from pippa_ops.cli.common import HostOpt, JsonOpt, emit_json
from pippa_ops.runs.locate import locate
from pippa_ops.runs.why import explain, render

RunArg = Annotated[str, typer.Argument(help="Run id, short id or session name.", show_default=False)]


def why_cmd(name: RunArg, host: HostOpt = None, as_json: JsonOpt = False) -> None:
    """Why a run's attempts ended: class, retry, deciding log lines, stuck frames, next command."""
    rec = locate([name], host)[name]
    tail = None
    if rec.job_id is not None and rec.attempts_doc is None and not rec.active:  # a SLURM job: its output
        from pippa_ops.runs.logs import last_lines, read_logs

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


def register(app: typer.Typer) -> None:
    app.command("why")(why_cmd)
