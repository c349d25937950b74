"""``pippa dash``: resolve the hosts, build one monitor per host, run the dashboard."""

from __future__ import annotations

import os
import subprocess
from typing import Annotated

import typer

from pippa_ops.errors import UsageError
from pippa_ops.hosts.inventory import HostSpec, load_inventory, resolve


def _attacher(specs: dict[str, HostSpec]):  # type: ignore[no-untyped-def]
    from pippa_ops.runs.launching.launch import attach_argv

    def attach(host: str, session: str) -> int:
        spec = specs[host]
        env = dict(os.environ)
        if spec.is_local:
            env.pop("TMUX", None)  # attaching from inside tmux is what the user asked for
        return subprocess.call(attach_argv(spec, session), env=env)

    return attach


def register(app: typer.Typer) -> None:
    @app.command("dash")
    def dash(
        hosts: Annotated[
            list[str] | None, typer.Argument(help="Hosts to watch (default: every inventory host).")
        ] = None,
        interval: Annotated[
            float,
            typer.Option("--interval", help="Whole seconds between GPU samples (nvidia-smi -l; 1 or more)."),
        ] = 1,
    ) -> None:
        """Live dashboard: GPUs, runs and training curves across hosts."""
        if interval < 1 or interval != int(interval):  # 2.0 is 2; 2.5 is refused, not rounded
            raise UsageError(f"--interval must be 1 or more whole seconds (like nvidia-smi -l): {interval:g}")
        names = list(dict.fromkeys(hosts or load_inventory()))
        if not names:
            raise UsageError("no hosts in the inventory: name some (`pippa dash local` watches this machine)")
        specs = {spec.name: spec for spec in map(resolve, names)}
        from pippa_ops.dash import create_app
        from pippa_ops.monitor.host import HostMonitor
        from pippa_ops.monitor.rows import Copies

        copies = Copies()  # one for all the monitors: a stale copy shows as ps shows it
        monitors = {
            n: HostMonitor(spec, interval_s=int(interval), copies=copies) for n, spec in specs.items()
        }
        create_app(list(specs), monitors, attach=_attacher(specs)).run()
