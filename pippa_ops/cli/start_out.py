"""How ``pippa run`` and ``pippa resume`` report a start (``runs.launching.startup`` watches it): a run that
ended in the window says its state and reason line, and pippa exits non-zero unless it exited 0."""

from __future__ import annotations

import shutil
import sys
from typing import Annotated

import typer

from pippa_ops.cli.common import note
from pippa_ops.errors import ExitCode
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.records.listing import RunRecord
from pippa_ops.transport.base import Transport

WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        show_default=False,
        help="Most seconds to watch a start: a recipe until its trainer's first line (default "
        "20), a --cmd for an early exit (default 3); or PIPPA_RUN_WAIT_S.",
    ),
]
NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return as soon as the run is started.")]


def report_start(
    transport: Transport, spec: HostSpec, run_id: str, wait: float | None, *, recipe: bool, quiet: bool
) -> None:
    """Watch the start (``runs.launching.startup``): a run that ended in the window says its state and reason
    line, and pippa exits non-zero unless it exited 0; on a terminal, one line of progress meanwhile."""
    from pippa_ops.runs.launching.precheck import failure_hint
    from pippa_ops.runs.launching.startup import wait_seconds, watch_start

    wait_s = wait_seconds(wait, recipe)
    if wait_s <= 0:
        return
    line = _ProgressLine(spec.name, enabled=not quiet and sys.stderr.isatty())
    try:
        watch = watch_start(
            transport,
            spec.remote_dir,
            run_id,
            wait_s,
            until_first_line=recipe,
            progress=line.show if line.enabled else None,
        )
    finally:
        line.clear()
    rec = watch.record
    if rec is None or not watch.ended:
        if recipe and not watch.started and not quiet:
            note(
                f"{spec.name}: run {run_id} is still starting after {watch.waited_s:.0f}s; it goes on "
                f"(`pippa logs {run_id} --host {spec.name} -f` follows it)"
            )
        return
    if rec.state == "finished":
        if not quiet:
            typer.echo(f"  ended:   {rec.state_text}")
        return
    why = f": {rec.error}{failure_hint(rec.error, spec.name)}" if rec.error else ""
    took = f" after {rec.duration_s:.0f}s" if rec.duration_s is not None else ""
    note(
        f"{spec.name}: run {rec.run_id} {rec.state_text}{took}{why}"
        f" (pippa logs {rec.run_id} --host {spec.name})"
    )
    raise typer.Exit(int(ExitCode.FAILURE))


class _ProgressLine:
    """``starting on h100-a: 6s: <the run's last output line>``, redrawn in place on stderr."""

    def __init__(self, host: str, enabled: bool) -> None:
        self.host, self.enabled, self.drawn = host, enabled, False

    def show(self, waited: float, rec: RunRecord | None) -> None:
        text = f"starting on {self.host}: {waited:.0f}s"
        text += f": {rec.last_line}" if rec is not None and rec.last_line else ""
        width = shutil.get_terminal_size((80, 24)).columns - 1
        sys.stderr.write("\r\x1b[2K" + (text if len(text) <= width else text[: width - 1] + "…"))
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
