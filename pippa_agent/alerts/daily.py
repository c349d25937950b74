"""The host's ``daily_budget``: what its runs spent since local midnight (pippa_contract.ledger over each
run's priced attempts), told once at 80%, and at 100% every run going gets ``budget_stop``, which its
supervisor reads as its budget spent (it saves, stops, class ``budget``; pippa_agent.supervise.budget).
A run without a supervisor (no restart policy, no --budget) does not read it: ``pippa stop`` it.

Python >= 3.8, standard library and pippa_contract only."""

from __future__ import annotations

import os
import time

from pippa_agent.alerts.files import here, read_json, write_json
from pippa_contract import ledger
from pippa_contract import rundir as rd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

DAILY_STATE = "daily.json"
RECENT_S = 2 * 86400.0  # only run directories touched within this are read


def midnight(now: float) -> float:
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


def spent_today(runs_dir: str, now: float) -> float:
    since, total = midnight(now), 0.0
    try:
        entries = list(os.scandir(runs_dir))
    except OSError:
        return 0.0
    for entry in entries:
        path = os.path.join(entry.path, rd.ATTEMPTS_JSON)
        try:
            if now - os.stat(path).st_mtime > RECENT_S:
                continue
        except OSError:
            continue
        doc = read_json(path)
        rows = [a for a in doc.get("attempts") or [] if isinstance(a, dict)] if isinstance(doc, dict) else []
        total += ledger.spent_since(rows, since, now)
    return total


def check_daily(
    cfg: dict[str, Any], going: list[str], now: float, tell: Callable[[str, str, str], None]
) -> str | None:
    """Alert once a day at 80% of ``daily_budget``; at 100% mark every run going ``budget_stop``. What it
    did ("alert", "stop") or None."""
    amount = cfg.get("daily_budget")
    if not isinstance(amount, (int, float)) or amount <= 0:
        return None
    runs_dir = os.path.join(os.path.expanduser(str(cfg.get("remote_dir") or "~/pippa")), rd.RUNS)
    spent = spent_today(runs_dir, now)
    day = time.strftime("%Y-%m-%d", time.localtime(now))
    state = read_json(here(DAILY_STATE))
    state = state if isinstance(state, dict) and state.get("day") == day else {"day": day}
    said = f"{spent:.2f} of the host's daily budget {amount:g} spent today"
    if spent >= amount:
        for run_id in going:
            marker = os.path.join(runs_dir, run_id, rd.BUDGET_STOP)
            if not os.path.exists(marker):
                with open(marker, "w") as f:
                    f.write(f"{now:.0f}\n")
        if not state.get("stopped"):
            state["stopped"] = True
            write_json(here(DAILY_STATE), state)
            tell("daily budget", "host", said + ": its runs save and stop")
            return "stop"
        return None
    if spent >= ledger.ALERT_AT * amount and not state.get("alerted"):
        state["alerted"] = True
        write_json(here(DAILY_STATE), state)
        tell("daily budget", "host", said)
        return "alert"
    return None
