"""A run's budget on the host (run.json's ``restart.budget``, ``pippa run --budget "$300"``): the price each
attempt runs at, recorded in it (pippa_contract.ledger), one alert at 80% of the budget, and at 100% the
attempt ended as a stop (the trainer saves its checkpoint) with the class ``budget``, never retried.

Standard library only, python3 >= 3.8."""

from __future__ import annotations

import os

from pippa_agent.supervise.files import read_json
from pippa_contract import ledger
from pippa_contract import rundir as rd
from pippa_contract.alerts import cost_so_far, money, run_gpus
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def price_s(command: str) -> tuple[float | None, str | None]:
    """Money per second of this run on this host (its rate and the run's share of the GPUs), and the
    currency, from the alerts' config.json that `pippa up` writes; None where the host has no rate."""
    cfg = read_json(os.path.join(os.path.expanduser(ALERTS_DIR), ALERTS_CONFIG))
    cfg = cfg if isinstance(cfg, dict) else {}
    gpus = cfg.get("gpus") if isinstance(cfg.get("gpus"), int) else None
    rates = (cfg.get("cost_per_hour"), cfg.get("cost_per_gpu_hour"))
    per_hour = cost_so_far(3600.0, rates[0], rates[1], run_gpus(command), gpus)
    currency = cfg.get("currency") if isinstance(cfg.get("currency"), str) else None
    return (per_hour / 3600.0 if per_hour is not None else None), currency


class Budget:
    """Checked by the supervisor each poll: ``check`` says "alert" once at 80%, "stop" at 100%."""

    def __init__(self, amount: float | None, currency: str | None = None) -> None:
        self.amount, self.currency = amount, currency
        self.hit = False

    def check(self, doc: dict[str, Any], now: float, run_dir: str | None = None) -> str | None:
        if run_dir is not None and not self.hit and os.path.exists(os.path.join(run_dir, rd.BUDGET_STOP)):
            self.hit = True  # the host's daily_budget is spent (pippa_agent.alerts.daily)
            return "stop"
        if self.amount is None:
            return None
        spent = ledger.spent(doc.get("attempts") or [], now)
        if spent >= self.amount and not self.hit:
            self.hit = True
            return "stop"
        if spent >= ledger.ALERT_AT * self.amount and not doc.get("budget_alerted"):
            doc["budget_alerted"] = True
            return "alert"
        return None

    def said(self, doc: dict[str, Any], now: float) -> str:
        spent = ledger.spent(doc.get("attempts") or [], now)
        if self.amount is None:
            return f"the host's daily budget is spent ({money(spent, self.currency)} by this run)"
        return f"{money(spent, self.currency)} of its budget {money(self.amount, self.currency)} spent"


def step_span(metrics: str, start: float, end: float) -> dict[str, float]:
    """The times of the first and last step rows an attempt wrote (``first_step_t``, ``last_step_t``),
    recorded in it at its end so the ledger splits its time without the metrics file."""
    import json

    times = []
    try:
        with open(metrics, "rb") as f:
            for line in f:
                if b'"step"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                t = rec.get("time") if isinstance(rec, dict) and rec.get("type") == "step" else None
                if isinstance(t, (int, float)) and start <= t <= end:
                    times.append(float(t))
    except OSError:
        return {}
    return {"first_step_t": min(times), "last_step_t": max(times)} if times else {}


def save_time(saves: str, start: float, end: float) -> dict[str, float]:
    """``save_s``: the seconds of the checkpoint writes (the trainer's saves.jsonl) that ended within an
    attempt, recorded in it at its end for the ledger's checkpoint part; nothing without a save."""
    import json

    total, found = 0.0, False
    try:
        with open(saves, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line (the trainer killed while writing it)
                a, b = (rec.get("start"), rec.get("end")) if isinstance(rec, dict) else (None, None)
                if isinstance(a, (int, float)) and isinstance(b, (int, float)) and start <= b <= end:
                    total, found = total + max(0.0, b - max(a, start)), True
    except OSError:
        return {}
    return {"save_s": total} if found else {}
