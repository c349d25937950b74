"""The tables of ps/runs/hosts at 80 columns (issue 26): the layout, short run ids, the ps selection.
Golden files under tests/ops/golden/ hold the expected 80- and 160-column tables."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pippa_ops.cli.run_tables import render_ps, render_runs, select_shown
from pippa_ops.cli.table import Column, layout
from pippa_ops.errors import AmbiguousSession, HostUnreachable
from pippa_ops.runs.reading.catalog import RunInfo
from pippa_ops.runs.records.listing import HostRuns, RunRecord, select_runs
from pippa_ops.runs.records.shortid import designates, short_ids

GOLDEN = Path(__file__).with_name("golden")
T0 = 1795000000.0  # 2026-11-18, a fixed clock for the golden tables


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _rec(run_id: str, state: str, **kw: object) -> RunRecord:
    base: dict[str, object] = dict(
        host="h100-a",
        session="training",
        recipe=run_id.split("-")[2],
        command="x",
        started=T0,
        duration_s=754.0,
        last_step=120,
        last_reward=0.8125,
        commit="0123456789abcdef",
        dirty=False,
    )
    base.update(kw)
    return RunRecord(run_id=run_id, state=state, **base)  # type: ignore[arg-type]


RECORDS = [
    _rec(
        "20261118-101500-overfit_aggressive-3fa2",
        "failed",
        exit_code=1,
        session="sweep",
        error="ModuleNotFoundError: No module named 'trl'",
    ),
    _rec("20261118-101510-overfit_memory-91c0", "running", session="sweep", dirty=True),
    _rec(
        "20261118-120000-tiny-a3f9", "finished", exit_code=0, host="local", last_reward=None, last_step=None
    ),
    _rec(
        "20261118-130000-cmd-a3f9",
        "running",
        recipe=None,
        host="h100-b",
        command="python -c 'import time; time.sleep(3600)' && echo done with a long command line",
    ),
]


def test_short_ids_are_the_shortest_unique_tail_and_designate_their_run() -> None:
    ids = [r.run_id for r in RECORDS]
    short = short_ids(ids)
    assert short == {ids[0]: "3fa2", ids[1]: "91c0", ids[2]: "tiny-a3f9", ids[3]: "cmd-a3f9"}
    for full, s in short.items():
        assert designates(s, full) and [i for i in ids if designates(s, i)] == [full]
    assert designates("20261118-1015", ids[0]) and not designates("201", ids[0])  # prefixes of 4 or more


def test_a_short_id_selects_its_run_and_an_ambiguous_one_is_refused() -> None:
    runs = HostRuns(host="h100-a", now=T0, runs=tuple(RECORDS))
    assert [r.run_id for r in select_runs(runs, "3fa2")] == [RECORDS[0].run_id]
    in_session = [RECORDS[0].run_id, RECORDS[1].run_id]
    assert [r.run_id for r in select_runs(runs, "sweep")] == in_session  # a session name still wins
    with pytest.raises(AmbiguousSession, match="fits several runs"):
        select_runs(runs, "a3f9")


@pytest.mark.parametrize("width", [80, 160])
def test_the_ps_table_fits_the_width_and_matches_its_golden_file(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    errors = {"h100-c": HostUnreachable("h100-c: cannot connect to 203.0.113.7:22: timed out")}
    render_ps(RECORDS, errors, ["h100-d"], hidden=3)
    out = capsys.readouterr().out
    table = out.splitlines()[: 1 + 2 + len(RECORDS)]  # header, two host rows, the runs
    assert all(len(line) <= width for line in table)
    assert out == (GOLDEN / f"ps_{width}.txt").read_text()


def test_a_long_state_drops_optional_columns_not_the_state_or_the_id(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state of issue 23's length still fits: columns go, the state and the id stay whole."""
    long_state = RunRecord(**{**RECORDS[0].__dict__, "state": "failed after 4 attempts", "exit_code": None})
    monkeypatch.setenv("COLUMNS", "80")
    render_ps([long_state, *RECORDS[1:]], {}, [], hidden=0)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines[: 1 + len(RECORDS)])
    assert "failed after 4 attempts" in lines[1] and " 3fa2 " in lines[1]


def test_layout_drops_the_highest_drop_first_then_cuts_the_flex_column() -> None:
    cols = [Column("A"), Column("LABEL", flex=True), Column("OPT1", drop=1), Column("OPT2", drop=2)]
    rows = [["aaaa", "a long label that must give", "o1", "o2"]]
    assert layout(cols, rows, 200) == [
        "A     LABEL                        OPT1  OPT2",
        "aaaa  a long label that must give  o1    o2",
    ]
    assert layout(cols, rows, 40) == [
        "A     LABEL                        OPT1",
        "aaaa  a long label that must give  o1",
    ]
    assert layout(cols, rows, 20) == ["A     LABEL", "aaaa  a long label…"]
    # capped at FLEX_CAP (24), OPT1 still does not fit: it goes, and gives its room back to the label
    assert layout(cols, rows, 34) == ["A     LABEL", "aaaa  a long label that must give"]


def test_ps_shows_running_runs_and_the_last_ended_ones() -> None:
    ended = [
        _rec(f"20261118-1{i:05d}-tiny-{i:04x}", "finished", exit_code=0, started=T0 + i, ended=T0 + i)
        for i in range(15)
    ]
    running = _rec("20261118-000000-tiny-ffff", "running", started=T0 - 10)
    shown, hidden = select_shown([running, *ended])
    assert shown == [running, *ended[5:]] and hidden == 5
    assert select_shown([running, *ended], last=2) == ([running, *ended[13:]], 13)
    assert select_shown([running, *ended], show_all=True) == ([running, *ended], 0)
    assert select_shown([running, *ended], state="running") == ([running], 0)
    assert select_shown([running, *ended], since=T0 + 12) == (ended[12:], 0)


def test_ps_last_0_still_lists_lost_runs() -> None:
    lost = _rec("20261118-000001-tiny-aaaa", "lost", started=T0 - 20)
    done = _rec("20261118-000002-tiny-bbbb", "finished", exit_code=0, started=T0, ended=T0)
    assert select_shown([lost, done], last=0) == ([lost], 1)


@pytest.mark.parametrize(("sort", "column"), [("best", "BEST"), ("steps", "STEPS"), ("duration", "DURATION")])
def test_runs_at_80_columns_keeps_the_column_it_is_sorted_by(
    sort: str, column: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs --sort best` once dropped BEST for room: the sorted list looked unsorted."""
    monkeypatch.setenv("COLUMNS", "80")
    infos = [
        RunInfo(r, steps=120, final_reward=0.5, best_reward=0.9 - i / 10, eval={"accuracy": 0.5})
        for i, r in enumerate(RECORDS)
    ]
    render_runs(infos, {}, eval_text=lambda e: "accuracy 0.500", wandb_text=lambda w: "-", sort=sort)
    lines = capsys.readouterr().out.splitlines()
    assert column in lines[0].split() and all(len(line) <= 80 for line in lines), lines
    if sort == "best":
        assert "0.900" in lines[1] and "0.600" in lines[4]


def test_a_cost_is_a_cost_column_in_the_hosts_currency_never_a_bare_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    priced = [RunRecord(**{**r.__dict__, "cost": 0.031, "currency": "$"}) for r in RECORDS]
    render_ps(priced, {}, [], hidden=0)
    lines = capsys.readouterr().out.splitlines()
    assert "COST" in lines[0].split() and all("$0.03" in line for line in lines[1:5]), lines
    assert "(0.03)" not in "\n".join(lines)


@pytest.mark.parametrize("width", [80, 160])
def test_a_600_character_reason_is_cut_in_the_state_and_every_other_column_stays(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that failed on a long config error: its state is cut in the table (the whole reason is
    printed under it), and ps and runs keep the columns they have without it: SESSION, DURATION and COST."""
    reason = "ValueError: " + "the recipe's setting does not fit this host; " * 14
    assert len(reason) >= 600
    recs = [
        _rec(
            f"20261118-1{i}0000-tiny-{i}a{i}f",
            "running",
            session="s",
            recipe="tiny",
            cost=0.031,
            currency="$",
        )
        for i in range(3)
    ]
    attempts = {"attempts": [{"attempt": 1, "class": "config", "reason": reason}]}
    bad = RunRecord(
        **{
            **recs[0].__dict__,
            "state": "failed",
            "exit_code": 1,
            "failure": f"config ({reason})",
            "error": reason,
            "attempts_doc": attempts,
        }
    )
    monkeypatch.setenv("COLUMNS", str(width))
    render_ps(recs, {}, [], hidden=0)
    plain = capsys.readouterr().out.splitlines()[0]
    render_ps([bad, *recs[1:]], {}, [], hidden=0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == plain.split(), (plain, lines[0])
    assert all(len(line) <= width for line in lines[:4]), lines
    assert {"SESSION", "DURATION", "COST"} <= set(lines[0].split()), lines[0]
    assert "config" in lines[1] and "…" in lines[1] and "$0.03" in lines[1]
    assert any(reason.strip() in line for line in lines[3:])  # the whole reason, under the table
    assert sum(line.count(reason.strip()) for line in lines[3:]) == 1, lines[3:]  # once (it came twice)
    for shown in (recs, [bad, *recs[1:]]):
        infos = [RunInfo(r, steps=120, final_reward=0.5, best_reward=0.9, eval=None) for r in shown]
        render_runs(infos, {}, eval_text=lambda e: "-", wandb_text=lambda w: "-")
    plain_runs, runs = capsys.readouterr().out.split("HOST")[1:]
    assert runs.splitlines()[0].split() == plain_runs.splitlines()[0].split(), (plain_runs, runs)
    assert "COST" in runs.splitlines()[0] and all(len(x) <= width for x in runs.splitlines()), runs
