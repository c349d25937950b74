"""``pippa samples RUN``: what the model wrote, with its rewards (docs/samples.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from pippa_ops.cli.common import HostOpt, JsonOpt, RunsDirOpt, console, emit_json
from pippa_ops.errors import UsageError

if TYPE_CHECKING:
    from pippa_contract.messages import SamplesRequest

STYLES = {"head": "bold", "prompt": "dim", "text": "", "meta": "cyan", "warn": "bold yellow"}


def samples_cmd(
    name: Annotated[str, typer.Argument(help="Run id (short ids too) or session.", show_default=False)],
    host: HostOpt = None,
    step: Annotated[int | None, typer.Option("--step", help="The rows of this sampled step.")] = None,
    last: Annotated[bool, typer.Option("--last", help="The newest sampled step (the default).")] = False,
    best: Annotated[bool, typer.Option("--best", help="Highest total reward first.")] = False,
    worst: Annotated[bool, typer.Option("--worst", help="Lowest total reward first.")] = False,
    grep: Annotated[str | None, typer.Option("--grep", help="The newest rows holding TEXT.")] = None,
    n: Annotated[int, typer.Option("-n", help="Rows to show.", min=1)] = 4,
    kind: Annotated[str | None, typer.Option("--kind", help="Only rows of: train, eval, selfplay.")] = None,
    diff: Annotated[
        tuple[int, int] | None,
        typer.Option("--diff", help="Steps A B: the same prompts' completions side by side."),
    ] = None,
    runs_dir: RunsDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the model wrote at a step: prompt, completion, rewards per function, length; alarms."""
    from pippa_ops.runs.reading import samples

    if step is not None and last:
        raise UsageError("--step and --last choose the step: give one")
    if best and worst:
        raise UsageError("--best and --worst order the rows: give one")
    if diff is not None and (step is not None or grep):
        raise UsageError("--diff A B compares two steps: leave out --step and --grep")
    if kind is not None and kind not in ("train", "eval", "selfplay"):
        raise UsageError(f"--kind must be train, eval or selfplay, not {kind!r}")
    request: SamplesRequest = {
        "step": step,
        "n": n,
        "best": best,
        "worst": worst,
        "grep": grep,
        "kind": kind,
        "diff": list(diff) if diff else None,
    }
    from pippa_ops.transport.shell import validate_name

    validate_name("run or session", name)
    if runs_dir is not None:  # a pulled copy: <runs-dir>/<host>/<run-id>, read here
        if host is None or not (runs_dir / host / name).is_dir():
            where = f"{runs_dir}/{host or 'HOST'}/{name}"
            raise UsageError(f"--runs-dir reads a pulled run (give --host and its run id): no {where}")
        where = host
        answer = samples.local_answer(runs_dir / host / name, request)
    else:
        from pippa_ops.runs.moving.locate import locate_host

        where = host if host is not None else locate_host(name, None)
        answer = samples.fetch(where, name, request)
    if as_json:
        emit_json({"host": where, **answer})
        return
    from rich.text import Text

    out = console()
    width = min(out.width, 100)
    lines = samples.side_by_side(answer, width) if diff else samples.blocks(answer, width)
    out.print(Text(f"{answer.get('run_id')} on {where}", style="bold"))
    for style, text in lines:
        out.print(Text(text, style=STYLES.get(style, "")), soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("samples")(samples_cmd)
