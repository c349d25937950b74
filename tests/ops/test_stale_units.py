"""Which copy of a run that moved is stale, and which a name means (pippa_ops.runs.moving.stale): pure, on
records as listings make them; and the laptop's pulled copy as ``pippa wait`` reads it, its host down."""

from __future__ import annotations

import json
from pathlib import Path

from pippa_ops.errors import PippaError
from pippa_ops.runs.moving.failover import from_pulled_copy
from pippa_ops.runs.moving.stale import live_hosts, settle, stale_copies
from pippa_ops.runs.records.listing import HostRuns, RunRecord, host_runs

RID = "20261129-031500-tiny-ab12"


def _rec(host: str, state: str, **kw: object) -> RunRecord:
    return RunRecord(host, RID, "night", "tiny", "python -m training_core.launch", state, **kw)  # type: ignore[arg-type]


def _listed(*recs: RunRecord) -> dict[str, HostRuns | PippaError]:
    return {r.host: HostRuns(r.host, 0.0, runs=(r,)) for r in recs}


def test_the_copy_on_the_host_a_run_moved_away_from_is_stale_while_it_goes_on() -> None:
    old, new = _rec("a", "running"), _rec("b", "running", moved_from="a")
    found = stale_copies(_listed(old, new))
    assert [(s.record.host, s.live_host) for s in found] == [("a", "b")]
    assert stale_copies(_listed(_rec("a", "lost"), new)) == []  # ended there: nothing to stop
    assert stale_copies(_listed(old, _rec("b", "finished", moved_from="a"))) != []  # the live copy ended
    assert stale_copies(_listed(old, _rec("b", "running"))) == []  # the same id, no move: not this rule


def test_a_run_moved_there_and_back_is_live_where_it_came_back() -> None:
    back = _rec("a", "running", moved_from="b")
    gone = _rec("b", "moved", moved_from="a", moved_to="a")
    assert stale_copies(_listed(back, gone)) == []


def test_a_moved_runs_name_means_its_live_copy() -> None:
    marked, live = _rec("a", "moved", moved_to="b"), _rec("b", "running", moved_from="a")
    assert live_hosts([("a", [marked]), ("b", [live])]) == ["b"]
    assert live_hosts([("a", [_rec("a", "running")]), ("b", [live])]) == ["a", "b"]  # ambiguous: both
    assert live_hosts([("a", [_rec("a", "moved", moved_to="c")]), ("b", [live])]) == ["a", "b"]


def test_ps_flags_a_stale_copy_until_it_is_ended() -> None:
    assert _rec("a", "running", stale_of="b").state_text == "stale copy (moved to b)"
    assert _rec("a", "moved", stale_of="b", moved_to="b").state_text == "moved to b"
    assert settle(_listed(_rec("a", "running"), _rec("b", "running"))) == _listed(
        _rec("a", "running"), _rec("b", "running")
    )  # nothing stale: the listings as they were


def test_the_moved_from_host_is_read_from_run_json() -> None:
    meta = {"session": "night", "recipe": "tiny", "moved_from": {"host": "a", "time": 1.0}}
    answer = {"now": 1.0, "runs": [{"run_id": RID, "meta": meta}]}
    assert host_runs("b", answer).runs[0].moved_from == "a"


def test_wait_reads_a_failover_run_from_the_pulled_copy_when_its_host_is_down(tmp_path: Path) -> None:
    copy = tmp_path / "a" / RID
    copy.mkdir(parents=True)
    meta = {"host": "a", "session": "night", "recipe": "tiny", "command": "x", "restart": {"failover": ["b"]}}
    (copy / "run.json").write_text(json.dumps(meta))
    rec = from_pulled_copy("ab12", tmp_path)
    assert rec is not None and (rec.host, rec.run_id, rec.failover, rec.active) == ("a", RID, ("b",), True)
    (copy / "run.json").write_text(json.dumps({**meta, "restart": {}}))
    assert from_pulled_copy(RID, tmp_path) is None  # no --failover: nothing to move it to
