"""``pippa doctor [HOST...]``: is this box healthy? One table per host (ok / warn / fail / skipped, a line
each saying what to do), the verdict last; ``--json`` for scripts, ``--history`` for the stored results."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pippa_ops.cli.common import JsonOpt, emit_json
from pippa_ops.errors import ExitCode, PippaError, UsageError

HostsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hosts (inventory names, aliases, addresses, 'local'); none: every inventory host.",
        show_default=False,
    ),
]


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
        from pippa_ops.cli.doctor_view import render_history, render_result

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


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
