"""``pippa doctor [HOST...]``: is this box healthy? One table per host (ok / warn / fail / skipped, a line
each saying what to do), the verdict last; ``--json`` for scripts, ``--history`` for the stored results."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from pippa_ops.cli.common import JsonOpt, emit_json
from pippa_ops.errors import ExitCode, PippaError, UsageError

HostsArg = Annotated[
    list[str] | None,
    typer.Argument(help="Hosts (inventory names, aliases, addresses, 'local'); none: every inventory host.",
                   show_default=False),
]  # fmt: skip
COLORS = {"ok": "green", "warn": "yellow", "fail": "red", "skipped": "bright_black"}


def doctor_command(
    hosts: HostsArg = None,
    as_json: JsonOpt = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="Passive checks only (seconds; no GPU load).")
    ] = False,
    show_history: Annotated[
        bool, typer.Option("--history", help="Show the results stored on each host, newest first.")
    ] = False,
) -> None:
    """Is the box healthy? Driver, ECC, remaps, slowdowns, PCIe, NVLink, Xids, torch, disk; GEMM, NCCL."""
    from pippa_ops import doctor
    from pippa_ops.hosts.connect import open_transport
    from pippa_ops.hosts.inventory import load_inventory, resolve

    names = list(hosts or []) or list(load_inventory())

    def one(name: str) -> Any:
        spec = resolve(name)
        with open_transport(spec) as transport:
            if show_history:
                return doctor.history(spec, transport)
            return doctor.check_host(spec, transport, quick)

    if not names:
        raise UsageError("no hosts in the inventory: name one, or `local`")
    from pippa_ops.fanout import fan_out

    answers = fan_out(names, one)
    if as_json:
        emit_json([json_entry(n, a, show_history) for n, a in answers.items()])
    for name, answer in answers.items():
        if as_json:
            break
        if isinstance(answer, PippaError):
            typer.secho(
                str(answer) if str(answer).startswith(name) else f"{name}: {answer}", fg="red", err=True
            )
        elif show_history:
            render_history(name, answer)
        else:
            render_result(answer)
    raise typer.Exit(int(exit_code(answers, show_history)))


def json_entry(name: str, answer: Any, show_history: bool) -> Any:
    if isinstance(answer, PippaError):
        return {"host": name, "error": str(answer), "exit_code": int(answer.exit_code)}
    return {"host": name, "results": answer} if show_history else answer


def exit_code(answers: dict[str, Any], show_history: bool) -> ExitCode:
    errors = [a for a in answers.values() if isinstance(a, PippaError)]
    if errors:
        return errors[0].exit_code
    if not show_history and any(a.get("verdict") == "fail" for a in answers.values()):
        return ExitCode.FAILURE
    return ExitCode.OK


def render_result(res: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pippa_ops.cli.common import console

    table = Table(title=res.get("host"), box=None, header_style="bold", title_justify="left", pad_edge=False)
    for col in ("STATUS", "CHECK", "GPU", "DETAIL"):
        table.add_column(col, overflow="fold")
    rank = {"fail": 0, "warn": 1, "skipped": 2, "ok": 3}
    for c in sorted(res.get("checks") or [], key=lambda c: rank.get(c.get("status"), 4)):
        status = str(c.get("status"))
        gpu = "-" if c.get("gpu") is None else str(c["gpu"])
        table.add_row(f"[{COLORS.get(status, 'white')}]{status}[/]", escape(str(c.get("check"))), gpu,
                      escape(str(c.get("detail"))))  # fmt: skip
    console().print(table)
    console().print(verdict_line(res))


def verdict_line(res: dict[str, Any]) -> str:
    """``t1: verdict fail (2 failed, 1 warning; passive + active checks)`` with colour markup."""
    checks = res.get("checks") or []
    n_fail = sum(c.get("status") == "fail" for c in checks)
    n_warn = sum(c.get("status") == "warn" for c in checks)
    verdict = str(res.get("verdict"))
    what = "passive checks only (--quick)" if res.get("quick") else "passive + active checks"
    return (f"{res.get('host')}: verdict [{COLORS.get(verdict, 'white')}]{verdict}[/] ({n_fail} failed, "
            f"{n_warn} warning(s); {what})")  # fmt: skip


def render_history(host: str, results: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from pippa_ops.cli.common import console
    from pippa_ops.doctor import age

    if not results:
        typer.echo(f"{host}: no doctor results stored yet (run `pippa doctor {host}`)")
        return
    table = Table(title=host, box=None, header_style="bold", title_justify="left", pad_edge=False)
    for col in ("WHEN", "AGO", "VERDICT", "FAILED/WARNED", "GEMM TFLOPS (min-max)", "ALL-REDUCE GB/s"):
        table.add_column(col)
    now = time.time()
    for r in results:
        stamp = float(r.get("time") or 0.0)
        bad = sorted(
            {str(c.get("check")) for c in r.get("checks") or [] if c.get("status") in ("fail", "warn")}
        )
        gemm = [g.get("gemm_tflops") for g in ((r.get("measured") or {}).get("gpus") or {}).values()]
        gemm = [v for v in gemm if isinstance(v, (int, float))]
        figures = f"{min(gemm):.0f}-{max(gemm):.0f}" if gemm else "-"
        bw = (r.get("measured") or {}).get("allreduce_gbs")
        verdict = str(r.get("verdict"))
        shown = f"[{COLORS.get(verdict, 'white')}]{verdict}[/]" + (" (quick)" if r.get("quick") else "")
        table.add_row(time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)), age(now - stamp), shown,
                      ", ".join(bad) or "-", figures, "-" if bw is None else f"{bw:.0f}")  # fmt: skip
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
