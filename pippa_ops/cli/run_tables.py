"""The tables of ``pippa ps`` and ``pippa runs``: which runs to show and how they fit the terminal.

At any width the id column holds whole ids when the whole table fits, else short ids
(``runs.records.shortid``, accepted by every verb); optional columns go before anything is cut
(``cli.table``). Why a run failed is printed whole under the table, for the runs shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import typer

from pippa_contract import states
from pippa_contract.termsafe import escape
from pippa_ops.cli.table import Column, layout, natural_width, terminal_width
from pippa_ops.errors import PippaError, refused_as
from pippa_ops.runs.launching.precheck import failure_hint
from pippa_ops.runs.records.cost import money
from pippa_ops.runs.records.shortid import short_ids

if TYPE_CHECKING:
    from pippa_ops.runs.reading.catalog import RunInfo
    from pippa_ops.runs.records.listing import RunRecord

DEFAULT_LAST = 10  # ended runs `pippa ps` shows by default (running ones always)


def when(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def num(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else f"{v:{fmt}}"


def commit_text(r: RunRecord) -> str:
    return "-" if not r.commit else r.commit[:8] + ("+dirty" if r.dirty else "")


def label(r: RunRecord) -> str:
    return escape(r.label.replace("\n", " "))


def select_shown(
    records: Sequence[RunRecord],
    *,
    since: float | None = None,
    state: str | None = None,
    last: int | None = None,
    show_all: bool = False,
) -> tuple[list[RunRecord], int]:
    """The runs ``ps`` lists (in their order) and how many ended ones it leaves out: those that match
    ``since``/``state``; of the ended, the ``last`` newest (default DEFAULT_LAST, none left out with
    ``show_all``, or when a filter is given without ``last``). A lost run is never left out: it needs
    someone (``pippa recover``)."""
    matching = [
        r
        for r in records
        if (since is None or (r.started or 0.0) >= since) and (state is None or r.state == state)
    ]
    if show_all or (last is None and (since is not None or state is not None)):
        return matching, 0
    keep_n = DEFAULT_LAST if last is None else max(0, last)
    ended = sorted(
        (r for r in matching if not r.active and r.state != "lost"), key=lambda r: r.ended or r.started or 0.0
    )
    hidden = {id(r) for r in ended[: max(0, len(ended) - keep_n)]}
    return [r for r in matching if id(r) not in hidden], len(hidden)


def _host_state(e: PippaError) -> str:
    """A host that did not answer, in a word or two (the whole reason goes under the table)."""
    return refused_as(e) or "unreachable"


def _host_error(host: str, e: PippaError) -> str:
    text = escape(e)
    return text if text.startswith(f"{host}:") else f"{host}: {text}"


def _fit(
    columns: list[Column], build: Callable[[dict[str, str]], list[list[str]]], ids: list[str], verbose: bool
) -> tuple[list[str], dict[str, str]]:
    """Whole ids when the whole table fits (or ``verbose``), else short ids; then fitted to the width.
    The lines and the id -> shown name map."""
    width = terminal_width()
    names = {i: i for i in ids}
    rows = build(names)
    if not verbose and natural_width(columns, rows) > width:
        names = short_ids(ids)
        rows = build(names)
    return layout(columns, rows, width), names


# a state that carries a long reason ("config (ValueError: ...)") is cut in the table, never at the cost
# of other columns: ps prints the whole reason under it, runs and why have it too
STATE = Column("STATE", flex=True, cap=32)
PS_COLUMNS = [
    Column("HOST"),
    Column("SESSION", drop=5),
    Column("RUN"),
    Column("RECIPE/COMMAND", flex=True),
    STATE,
    Column("STARTED", drop=6),
    Column("DURATION", drop=4),
    Column("COST", drop=3, right=True),  # only where a host has a rate (with_cost)
    Column("STEP", drop=2, right=True),
    Column("REWARD", drop=1, right=True),
    Column("COMMIT", drop=7),
]


def samples_hint(r: RunRecord) -> str:
    """Where to read what the model wrote when an alarm began."""
    step = f" --step {r.samples_step}" if r.samples_step is not None else ""
    return f"; read `pippa samples {r.run_id}{step} --host {r.host}`"


def with_cost(
    columns: list[Column], rows: list[list[str]], priced: bool
) -> tuple[list[Column], list[list[str]]]:
    """The COST column only where some run has a price: a column of dashes says nothing."""
    if priced:
        return columns, rows
    i = [c.name for c in columns].index("COST")
    return columns[:i] + columns[i + 1 :], [r[:i] + r[i + 1 :] for r in rows]


def render_ps(
    records: Sequence[RunRecord],
    errors: dict[str, PippaError],
    empty_hosts: Sequence[str],
    hidden: int,
    *,
    verbose: bool = False,
    all_ids: Sequence[str] = (),
) -> None:
    """The ps table, then one line per failed run shown (why) and per host that did not answer."""
    ids = list(dict.fromkeys([*all_ids, *(r.run_id for r in records)]))

    def build(name: dict[str, str]) -> list[list[str]]:
        rows = [[h, "-", "-", "(no runs)", *[""] * 7] for h in empty_hosts]
        rows += [[h, "-", "-", "-", _host_state(e), *[""] * 6] for h, e in errors.items()]
        for r in records:
            step = "-" if r.last_step is None else str(r.last_step)
            rows.append(
                [
                    r.host,
                    r.session,
                    name.get(r.run_id, r.run_id),
                    label(r),
                    r.state_text,
                    when(r.began),
                    duration(r.duration_s),
                    money(r.cost, r.currency),
                    step,
                    num(r.last_reward),
                    commit_text(r),
                ]
            )
        return with_cost(PS_COLUMNS, rows, priced)[1]

    priced = any(r.cost is not None for r in records)
    columns = with_cost(PS_COLUMNS, [], priced)[0]
    lines, shown = _fit(columns, build, ids, verbose)
    for line in lines:
        typer.echo(line)
    for r in records:
        if r.state in (states.FAILED, states.DIVERGED) and r.error:
            rid = shown.get(r.run_id, r.run_id)
            said = r.error.strip() in r.state_text  # a failure class's label carries its reason already
            why = "" if said else f": {r.error}"
            line = f"{r.host} {rid}: {r.state_text}{why}{failure_hint(r.error, r.host)}"
            typer.secho(escape(line), fg="red")
    for r in records:
        for skipped in r.skipped:  # a torn checkpoint its resume passed over (kept as <name>.torn)
            line = f"{r.host} {shown.get(r.run_id, r.run_id)}: resumed past {skipped}"
            typer.secho(escape(line), fg="yellow")
    for r in records:
        if r.warning:
            line = f"{r.host} {shown.get(r.run_id, r.run_id)}: warning: {r.warning}{samples_hint(r)}"
            typer.secho(escape(line), fg="yellow")
    for h, e in errors.items():
        typer.secho(_host_error(h, e), fg="red")
    if hidden:
        typer.echo(f"({hidden} older ended run{'s' * (hidden != 1)} not shown: --all or --last N)")


RUNS_COLUMNS = [
    Column("HOST"),
    Column("RUN"),
    Column("RECIPE/COMMAND", flex=True),
    STATE,
    Column("STARTED", drop=7),
    Column("DURATION", drop=6),
    Column("COST", drop=4, right=True),  # only where a host has a rate (with_cost)
    Column("STEPS", drop=2, right=True),
    Column("REWARD", drop=1, right=True),
    Column("BEST", drop=3, right=True),
    Column("EVAL", drop=5),
    Column("COMMIT", drop=9),
    Column("W&B", drop=10),
    Column("PULLED", drop=8),
]
SORT_COLUMNS = {"reward": "REWARD", "best": "BEST", "steps": "STEPS", "duration": "DURATION"}


def render_runs(
    infos: Sequence[RunInfo],
    errors: dict[str, PippaError],
    *,
    verbose: bool = False,
    eval_text: Callable[[Any], str],
    wandb_text: Callable[[Any], str],
    sort: str = "started",
) -> None:
    """The runs table; the column the list is sorted by (``sort``) is never dropped for room."""
    ids = [i.run_id for i in infos]
    keep = SORT_COLUMNS.get(sort)
    priced = any(i.record.cost is not None for i in infos)
    columns = [replace(c, drop=0) if c.name == keep else c for c in with_cost(RUNS_COLUMNS, [], priced)[0]]

    def build(name: dict[str, str]) -> list[list[str]]:
        rows = []
        for i in infos:
            r = i.record
            steps = "-" if i.steps is None else str(i.steps)
            rows.append(
                [
                    i.host,
                    name.get(r.run_id, r.run_id),
                    label(r),
                    r.state_text,
                    when(r.began),
                    duration(r.duration_s),
                    _cost(r),
                    steps,
                    num(i.final_reward),
                    num(i.best_reward),
                    eval_text(i.eval),
                    commit_text(r),
                    wandb_text(i.wandb),
                    "yes" if i.pulled else "",
                ]
            )
        rows += [[h, "-", "-", _host_state(e), *[""] * 10] for h, e in errors.items()]
        return with_cost(RUNS_COLUMNS, rows, priced)[1]

    for line in _fit(columns, build, ids, verbose)[0]:
        typer.echo(line)
    for h, e in errors.items():
        typer.secho(_host_error(h, e), fg="red")


def _cost(r: RunRecord) -> str:
    """``$41.20 (85% productive)``: the cost so far and, where the run has a ledger, its goodput."""
    from pippa_ops.runs.records.cost import goodput

    share = goodput(r.spend)
    return money(r.cost, r.currency) + (f" ({share})" if share and r.cost is not None else "")
