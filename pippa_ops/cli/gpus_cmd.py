"""``pippa gpus [HOST...]``: parsed nvidia-smi per GPU; several hosts (none: every inventory host) are
asked in parallel by one process; ``--watch`` re-renders each sample of one host's stream."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pippa_ops.cli.common import JsonOpt, emit_json
from pippa_ops.cli.complete import host_names
from pippa_ops.errors import ExitCode, PippaError, UsageError
from pippa_ops.gpu import Gpu, GpuReport, GpuStream, query, with_processes
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import LOCAL

HostsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hosts (inventory names, aliases, addresses, 'local'); none: every inventory host "
        "('local' when the inventory is empty).",
        show_default=False,
        autocompletion=host_names,
    ),
]


def _fmt(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def gpu_table(host: str, gpus: Sequence[Gpu]) -> Table:
    table = Table(title=host, box=None, header_style="bold", title_justify="left")
    for col in ("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "PROCESSES"):
        table.add_column(col)
    for g in gpus:
        mem = f"{_fmt(g.mem_used_mib)}/{_fmt(g.mem_total_mib)} MiB"
        power = f"{_fmt(g.power_w, digits=0)}/{_fmt(g.power_limit_w, 'W')}"
        procs = ", ".join(f"{p.pid} {p.name} {_fmt(p.used_mib, ' MiB')}" for p in g.processes) or "-"
        idx = "-" if g.index is None else str(g.index)
        table.add_row(idx, g.name, _fmt(g.util_pct, "%"), mem, _fmt(g.temp_c, "°C"), power, procs)
    return table


def gpus_cmd(
    hosts: HostsArg = None,
    as_json: JsonOpt = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep sampling (nvidia-smi -l) and re-render.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between samples with --watch.")
    ] = 2.0,
) -> None:
    """Per GPU: index, name, utilization, memory, temperature, power, and the processes on it."""
    if hosts is None or len(hosts) != 1:
        if watch:
            raise UsageError("--watch follows one host: name it")
        from pippa_ops.hosts.inventory import load_inventory

        names = list(hosts or []) or list(load_inventory()) or [LOCAL]
        if len(names) > 1:
            _many(names, as_json)
            return
        hosts = names
    try:
        spec, transport = connect(hosts[0])
    except PippaError as e:
        if not as_json:
            raise
        emit_json({"host": hosts[0], "error": str(e), "exit_code": int(e.exit_code)})  # scripts read JSON
        raise typer.Exit(int(e.exit_code)) from None
    with transport:
        report = query(transport)
        if report.unavailable:
            if as_json:
                emit_json({"host": spec.name, "gpus": [], "unavailable": report.unavailable})
            else:
                typer.echo(report.unavailable)
            raise typer.Exit(int(ExitCode.MISSING_TOOL))
        if as_json and not watch:
            emit_json({"host": spec.name, "gpus": [g.to_json() for g in report.gpus]})
            return
        console = Console()
        if not watch:
            console.print(gpu_table(spec.name, report.gpus))
            return
        stream = GpuStream(transport, interval)
        try:
            if as_json:
                for sample in stream.samples():
                    typer.echo(json.dumps({"host": spec.name, "gpus": [g.to_json() for g in sample]}))
                return
            with Live(gpu_table(spec.name, report.gpus), console=console, auto_refresh=False) as live:
                asked = time.monotonic()
                for sample in stream.samples():
                    # the stream has no processes: ask for them again, at most every interval
                    if time.monotonic() - asked >= interval:
                        report, asked = query(transport), time.monotonic()
                    live.update(gpu_table(spec.name, with_processes(sample, report)), refresh=True)
        finally:
            stream.close()


def _many(names: list[str], as_json: bool) -> None:
    """Every host asked at once (``fan_out``); one bad host stops none, its error comes last."""
    from pippa_ops.fanout import fan_out
    from pippa_ops.hosts.connect import open_transport
    from pippa_ops.hosts.inventory import resolve

    def one(name: str) -> GpuReport:
        with open_transport(resolve(name)) as transport:
            return query(transport)

    answers = fan_out(names, one)
    if as_json:
        emit_json(
            [
                {"host": n, "error": str(a), "exit_code": int(a.exit_code)}
                if isinstance(a, PippaError)
                else {"host": n, "gpus": [g.to_json() for g in a.gpus], "unavailable": a.unavailable}
                for n, a in answers.items()
            ]
        )
    else:
        console = Console()
        for name, a in answers.items():
            if isinstance(a, GpuReport):
                # "local: no NVIDIA GPU (...)" names its host already (pippa_ops.gpu.query)
                console.print(gpu_table(name, a.gpus) if not a.unavailable else a.unavailable)
        for name, a in answers.items():
            if isinstance(a, PippaError):
                typer.secho(str(a) if str(a).startswith(name) else f"{name}: {a}", fg="red", err=True)
    failed = [a for a in answers.values() if isinstance(a, PippaError)]
    if failed:
        raise typer.Exit(int(failed[0].exit_code))


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus_cmd)
