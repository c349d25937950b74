"""The host's daily_budget (pippa_agent.alerts.daily) and the supervisor's reading of it, in a throw-away
home on a fake clock: told once at 80%, then every run going is marked ``budget_stop`` and its supervisor's
budget ends it; yesterday's spend does not count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pippa_agent.alerts.daily import check_daily, midnight
from pippa_agent.supervise.budget import Budget
from pippa_contract.ledger import spent_since


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".config" / "pippa" / "alerts").mkdir(parents=True)
    return tmp_path


def _run(home: Path, run_id: str, start: float) -> Path:
    d = home / "pippa" / "runs" / run_id
    d.mkdir(parents=True)
    doc = {"attempts": [{"attempt": 1, "start": start, "end": None, "class": None, "price_s": 1.0}]}
    (d / "attempts.json").write_text(json.dumps(doc))
    return d


def test_the_daily_budget_tells_once_at_80_percent_then_marks_the_runs_going(home: Path) -> None:
    import time

    now = time.time()
    today = midnight(now)
    if now - today < 200:  # a run 100 s old must be today's
        pytest.skip("too close to midnight")
    d = _run(home, "r1", now - 100)  # $1/s for 100 s: $100 so far
    told: list[tuple[str, str, str]] = []
    cfg = {"daily_budget": 120.0, "remote_dir": str(home / "pippa")}
    assert check_daily(cfg, ["r1"], now, lambda *a: told.append(a)) == "alert"
    assert check_daily(cfg, ["r1"], now + 5, lambda *a: told.append(a)) is None  # once
    assert not (d / "budget_stop").exists()
    assert check_daily(cfg, ["r1"], now + 20, lambda *a: told.append(a)) == "stop"
    assert (d / "budget_stop").exists() and [t[0] for t in told] == ["daily budget", "daily budget"]
    budget = Budget(None, "$")
    assert budget.check({"attempts": []}, now, str(d)) == "stop" and budget.hit
    assert "daily budget" in budget.said({"attempts": []}, now)


def test_only_todays_part_of_an_attempt_counts() -> None:
    rows = [{"start": 0.0, "end": 1000.0, "price_s": 1.0}, {"start": 1200.0, "end": None, "price_s": 2.0}]
    assert spent_since(rows, 500.0, 1300.0) == pytest.approx(500 + 200)
    assert spent_since(rows, 1100.0, 1300.0) == pytest.approx(200)
