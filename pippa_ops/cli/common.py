"""Bits every command group shares: consoles, --json output, the options several commands take.

Light on purpose: command modules import it at start-up, so rich loads only when a console is used.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pippa_ops.cli.complete import host_names

if TYPE_CHECKING:
    from rich.console import Console

HOST_HELP = "Host: inventory name, ~/.ssh/config alias, [user@]address, or 'local'."

HostArg = Annotated[str, typer.Argument(help=HOST_HELP, show_default=False, autocompletion=host_names)]
HostOpt = Annotated[str | None, typer.Option("--host", "-H", help=HOST_HELP, autocompletion=host_names)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw",
        help="The log's bytes as they are, escape sequences included (a pipe gets "
        "them anyway; a terminal otherwise gets only text, tabs and colours).",
    ),
]
RunsDirOpt = Annotated[
    Path | None,
    typer.Option("--runs-dir", help="Where pulled runs live (<dir>/<host>/<run-id>). Default: <repo>/runs."),
]
HostsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--host", "-H", help=HOST_HELP + " Repeatable; default: every host.", autocompletion=host_names
    ),
]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Only runs started since: 30m, 12h, 2d, 1w, or 2026-11-20.")
]
StateOpt = Annotated[
    str | None, typer.Option("--state", help="Only runs in this state (running, finished, failed, ...).")
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Whole run ids, always.")]
FollowOpt = Annotated[
    bool, typer.Option("--follow", "-f", help="Stream the log until the run ends (Ctrl-C stops following).")
]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a recipe value: key=value.")]
AcceptNewOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new",
        help="Record an unknown host key in ~/.ssh/known_hosts (like ssh's accept-new); "
        "a changed key is still refused.",
    ),
]


@functools.cache
def console() -> Console:
    """stdout for people (rich markup), created on first use."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@functools.cache
def err_console() -> Console:
    """stderr for progress lines, created on first use."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """Machine-readable output on stdout, nothing else on it."""
    typer.echo(json.dumps(data, indent=2, default=str))


def note(message: str) -> None:
    """One ``pippa: ...`` line on stderr (what happened besides the output)."""
    typer.echo(f"pippa: {message}", err=True)


def goes_on_line(verb: str, run_id: str, session: str, host: str) -> str:
    """What Ctrl-C on ``run --follow`` / ``logs -f`` / ``wait`` did: stopped this command, not the run."""
    target = run_id if session.startswith("slurm") else session
    return (
        f"pippa: stopped {verb}; {run_id} goes on in session {session} on {host} "
        f"(`pippa stop {target} --host {host}` stops it)"
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
