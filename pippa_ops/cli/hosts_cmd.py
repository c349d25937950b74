"""``pippa hosts / up / sync``: parse options, call one core function, render, exit.

The core (SSH, host prep, sync) and rich's tables are imported inside the command that needs
them: this module is imported to run any of its commands, and `pippa sync` should not pay for the
rest.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pippa_ops.cli.common import AcceptNewOpt, HostArg, JsonOpt, console, emit_json, err_console, human_bytes
from pippa_ops.cli.table import Column, layout, terminal_width
from pippa_ops.errors import ExitCode

if TYPE_CHECKING:
    from pippa_ops.provision.prep import UpReport
    from pippa_ops.provision.survey import HostRow
    from pippa_ops.sync import SyncResult


def hosts_command(
    json_out: JsonOpt = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Show where each field came from (hosts.toml, ssh_config, pippa.toml)."
        ),
    ] = False,
    disconnect: Annotated[
        bool,
        typer.Option(
            "--disconnect", help="Close the SSH connections the connection keeper holds, and end it."
        ),
    ] = False,
) -> None:
    """Hosts (local, pippa.toml, ~/.config/pippa/hosts.toml, ~/.ssh/config aliases), checked in parallel."""
    if disconnect:
        from pippa_ops.transport.reuse import disconnect as close_kept

        closed = close_kept()
        if json_out:
            emit_json({"keeper_running": closed is not None, "closed": closed or 0})
        elif closed is None:
            typer.echo("no connection keeper was running")
        else:
            typer.echo(f"closed {closed} kept connection(s); the connection keeper has exited")
        return
    from pippa_ops.hosts.connect import open_transport
    from pippa_ops.hosts.inventory import (
        alias_spec,
        load_inventory,
        load_ssh_config,
        local_spec,
        ssh_aliases,
    )
    from pippa_ops.provision.survey import survey

    inventory = load_inventory()
    # The keeper's answer carries the aliases' lookups; the inventory's addresses ride along with it
    config = load_ssh_config(tuple(s.address for s in inventory.values() if s.address))
    aliases = [alias_spec(config, a) for a in ssh_aliases(config) if a not in inventory]
    rows = survey([local_spec(), *inventory.values(), *aliases], open_transport)
    if json_out:
        emit_json([r.to_json() for r in rows])
    else:
        render_hosts(rows, explain)


HOSTS_COLUMNS = [
    Column("HOST"),
    Column("ADDRESS"),
    Column("REMOTE DIR", drop=2),
    Column("SOURCE", drop=1),
    Column("STATUS", flex=True, cap=40),
]  # the whole reason goes under


def render_hosts(rows: list[HostRow], explain: bool = False) -> None:
    """The table fits the terminal; why a host is down (a host key's fingerprint whole) and, with
    --explain, where each field came from, go on lines of their own under it."""
    rows_text = []
    for r in rows:
        where = r.address if r.user is None else f"{r.user}@{r.address}"
        where += f":{r.port}" if r.port else ""
        status = f"up {r.latency_ms:.0f} ms" if r.reachable else r.down_as
        status += ", no python" if r.python_missing else ""
        if r.doctor:
            from pippa_ops.doctor import summary_text

            status += ", " + summary_text(r.doctor)
        rows_text.append([r.name, where, r.remote_dir, r.source.split(":")[0], status])
    for line in layout(HOSTS_COLUMNS, rows_text, terminal_width()):
        typer.echo(line)
    for r in rows:
        if not r.reachable:
            why = r.error or "unreachable"
            typer.secho(why if why.startswith(f"{r.name}: ") else f"{r.name}: {why}", fg="red")
        if r.python_missing:
            typer.secho(
                f"{r.name}: its python {r.python_missing} is not there: run `pippa up {r.name}`, "
                f"or fix python in its entry ({r.origins.get('python', 'the inventory')})",
                fg="red",
            )
    if explain:
        for r in rows:
            if r.origins:
                typer.echo(f"{r.name}: " + ", ".join(f"{k} from {v}" for k, v in r.origins.items()))
    for r in rows:
        if r.alerts:  # alerts, rate, idle watcher, failed deliveries (pippa_ops.alerts): a line each
            from pippa_ops.provision.alerts import status_line

            typer.echo(f"{r.name}: {status_line(r.alerts)}")


def up_command(host: HostArg, accept_new: AcceptNewOpt = False, json_out: JsonOpt = False) -> None:
    """Prepare a host: check tmux/GPUs/python/disk, install uv, sync, run setup, push secrets."""
    from rich.markup import escape

    from pippa_ops.hosts.connect import connect
    from pippa_ops.provision.prep import up
    from pippa_ops.repo import project

    tree = project()
    keys = _KeysWatch(host, accept_new)
    try:
        spec, transport = connect(host, accept_new=accept_new)
        with transport:  # "sending" once the host answered (its key checked), never before a refusal
            report = up(
                spec,
                transport,
                tree.root,
                emit=lambda line: err_console().print(escape(line)),
                connected=lambda: err_console().print(escape(f"pippa: {tree.line('sending')}")),
            )
    finally:
        keys.report()  # a key recorded stays recorded when a later step fails: say so either way
    if json_out:
        emit_json(report.to_json())
    else:
        render_up(report)


_UUID = re.compile(r"\s*\(UUID: [^)]*\)")


def render_up(r: UpReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    p = r.probe
    # one line per GPU at 80 columns: nvidia-smi -L's UUIDs stay in --json
    gpus = "\n".join(_UUID.sub("", g) for g in p.gpus) if p.gpus else "none (this host has no NVIDIA GPU)"
    rows = [
        ("host", r.host),
        ("GPUs", gpus),
        ("driver", p.driver or "-"),
        ("CUDA", p.cuda or "-"),
        ("python", r.python),
        ("uv", (p.uv or "-") + (" (installed now)" if r.uv_installed else "")),
        ("tmux", p.tmux or "-"),
        ("python3", f"{p.python} (runs pippa's host agent; needs >= 3.8)"),
        ("sandbox", (p.sandbox.summary() if p.sandbox else "-") + (" (installed now)" * r.bwrap_installed)),
        ("free disk", f"{p.free_disk_gb} GB" if p.free_disk_gb is not None else "-"),
        ("remote dir", r.remote_dir),
        ("synced", f"{len(r.sync.sent)} changed file(s) of {r.sync.files}"),
        ("setup", "ran" if r.setup_ran else "none (setup = [])" if r.setup_none else "up to date"),
        ("secrets", ", ".join(r.secrets.pushed) or "none"),
    ]
    if r.secrets.missing:
        rows.append(("not in .env", ", ".join(r.secrets.missing)))
    if r.alerts is not None:
        rows.append(("alerts", r.alerts.summary()))
        rows.append(("watcher", r.alerts.watch_summary()))
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, escape(value))
    console().print(table)
    if r.health is not None:
        from pippa_ops.cli.doctor_view import verdict_line

        for c in r.health.get("checks") or []:  # type: ignore[attr-defined]
            if c.get("status") in ("fail", "warn"):
                console().print(f"  {c['status']}: {escape(str(c['detail']))}")
        console().print(verdict_line(r.health) + f": `pippa doctor {r.host}` runs the GPU tests too")
    console().print(f"ready in {r.elapsed_s:.1f}s")


def sync_command(
    host: HostArg,
    delete: Annotated[bool, typer.Option("--delete", help="Also delete host files absent here.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would change; change nothing.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="With --delete: delete without asking, however many.")
    ] = False,
    accept_new: AcceptNewOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Copy the project's tree to the host: changed files only, one stream, deletions only with --delete."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.repo import project
    from pippa_ops.sync import sync

    tree = project()
    keys = _KeysWatch(host, accept_new)
    spec, transport = connect(host, accept_new=accept_new)
    confirm = None if yes else _deletions_check(tree.root)

    def say_sending() -> None:  # once the host answered (key verified): never before a refusal
        if not json_out:
            typer.echo(tree.line("would send" if dry_run else "sending"))

    with transport, _byte_progress(enabled=sys.stderr.isatty() and not (json_out or dry_run)) as progress:
        result = sync(
            spec,
            transport,
            tree.root,
            delete=delete,
            dry_run=dry_run,
            progress=progress,
            confirm=confirm,
            connected=say_sending,
        )
    keys.report()
    if json_out:
        emit_json(result.to_json())
    else:
        render_sync(result)


def _deletions_check(root: Path) -> Callable[[SyncResult], bool]:
    """Before a sync deletes many host files: ask on a terminal; elsewhere refuse in one line."""

    def ask(r: SyncResult) -> bool:
        what = (
            f"sync --delete would delete {len(r.deleted)} file(s) in {r.host}:{r.remote_dir} and send "
            f"{len(r.sent)}, to match {root}"
        )
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            from pippa_ops.errors import UsageError

            raise UsageError(f"{what}: nothing changed; `--dry-run` lists them, `--yes` deletes them")
        return typer.confirm(f"pippa: {what}. Go on?", err=True)

    return ask


@contextlib.contextmanager
def _byte_progress(enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """On a terminal, a transient line with the bytes sent so far and the rate (rich.progress), drawn
    from the first bytes sent (a question about deletions may come before)."""
    if not enabled:
        yield None
        return
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

    columns = (SpinnerColumn(), TextColumn("sending"), DownloadColumn(), TransferSpeedColumn())
    with contextlib.ExitStack() as stack:
        shown: list[tuple[Progress, Any]] = []

        def update(sent: int) -> None:
            if not shown:
                bar = stack.enter_context(Progress(*columns, console=err_console(), transient=True))
                shown.append((bar, bar.add_task("sync", total=None)))
            shown[0][0].update(shown[0][1], completed=sent)

        yield update


class _KeysWatch:
    """With --accept-new: after the command, one line per host key it recorded, and where."""

    def __init__(self, host: str, accept_new: bool) -> None:
        from pippa_ops.hosts.knownhosts import snapshot

        self.host = host
        self.before = snapshot() if accept_new else None

    def report(self) -> None:
        if self.before is None:
            return
        from pippa_ops.hosts.knownhosts import recorded_lines

        for line in recorded_lines(self.host, self.before):
            typer.echo(f"pippa: {line}", err=True)


def render_sync(r: SyncResult) -> None:
    """Plain lines (typer.echo, no rich: a sync is often run on its own and rich costs ~30 ms to load)."""
    if r.local:
        typer.echo(f"local: the repo itself is the remote dir ({r.remote_dir}); marker written")
        return
    verb = ("would send", "would delete") if r.dry_run else ("sent", "deleted")
    if r.dry_run:
        for name in r.sent:
            typer.echo(f"  send {name}")
        for name in r.deleted:
            typer.echo(f"  delete {name}")
    state = f"{(r.commit or 'no commit')[:10]}{' (dirty)' if r.dirty else ''}"
    size = human_bytes(r.send_size)
    if not r.dry_run:
        size += f", {human_bytes(r.bytes_sent)} on the wire"
    typer.echo(
        f"{r.host}:{r.remote_dir}: {verb[0]} {len(r.sent)} of {r.files} file(s)"
        f" ({size}), {verb[1]} {len(r.deleted)}; {state}; {r.elapsed_s:.2f}s"
    )


def register(app: typer.Typer) -> None:
    app.command("hosts")(hosts_command)
    app.command("up")(up_command)
    app.command("sync")(sync_command)


__all__ = ["ExitCode", "register"]
