"""Where the goodput ledger shows on the laptop: a record's ``spend`` (``ps``/``runs --json``' ``ledger``),
the runs table's cost cell, and compare's cost per eval point; pure, on records as listings make them."""

from __future__ import annotations

import pytest

from pippa_ops.runs.records.cost import goodput, per_eval_point
from pippa_ops.runs.records.listing import RunRecord

PRICED = {
    "attempts": [
        {
            "attempt": 1,
            "start": 0.0,
            "end": 100.0,
            "class": "crash",
            "price_s": 0.01,
            "decision": {"retry": True},
        },
        {
            "attempt": 2,
            "start": 110.0,
            "end": 410.0,
            "class": "completed",
            "price_s": 0.01,
            "first_step_t": 160.0,
            "last_step_t": 400.0,
        },
    ]
}


def _rec(doc: dict[str, object] | None) -> RunRecord:
    return RunRecord("h", "20261129-1-tiny-ab12", "s", "tiny", "x", "finished", ended=410.0, attempts_doc=doc)


def test_a_priced_runs_record_carries_its_ledger_and_an_unpriced_one_none() -> None:
    spend = _rec(PRICED).spend
    assert spend is not None and spend["failed"] == pytest.approx(1.0)
    assert spend["backoff"] == pytest.approx(0.1)
    assert spend["start-up"] == pytest.approx(0.5) and spend["productive"] == pytest.approx(2.5)
    assert _rec(PRICED).to_json()["ledger"] == spend
    assert _rec(None).spend is None and _rec(None).to_json()["ledger"] is None
    assert goodput(spend) == "61% productive" and goodput(None) == ""


def test_the_cost_per_eval_point_counts_up_to_the_best_evals_step() -> None:
    evals = {"eval/accuracy": [(50, 0.25), (100, 0.5), (200, 0.4)], "eval/loss": [(100, 0.1)]}
    assert per_eval_point(20.0, evals, 200) == pytest.approx(20.0 * 100 / 200 / 50)
    assert per_eval_point(None, evals, 200) is None and per_eval_point(20.0, {}, 200) is None
