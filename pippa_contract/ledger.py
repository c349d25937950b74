"""A run's spend and where it went (its goodput ledger), and its budget: one reading of attempts.json that
the host's supervisor (it stops a run at its budget) and the laptop (``pippa why``) share.

Each attempt records the price it ran at (``price_s``: money per second, the host's ``cost_per_hour``, or
``cost_per_gpu_hour`` times the run's GPUs, as config.json said when it started), so a run that moved to
a host with another price is priced per stretch. The ledger splits the time the run was billed for:

- ``productive``: between the attempt's start-up and its last step row, in an attempt that was not lost;
- ``start-up``: from an attempt's start to its first step row (model load, compilation, resume);
- ``stalled``: from a stalled attempt's last step row to its end;
- ``failed``: the whole of an attempt that crashed, ran out of memory, faulted or was lost (its steps
  after the last checkpoint are redone);
- ``health``: the supervisor's checks after an attempt ended, before it decides (the kernel log for Xid
  and OOM lines, the cgroup's OOM count, nvidia-smi for a faulted GPU): from its ``end`` to its
  ``checked_at``;
- ``checkpoint``: the checkpoint writes of an attempt that was not lost (``save_s``: the trainer's
  saves.jsonl, from the last callback before each save to its rename into place), taken out of its
  productive time (a lost attempt's saves stay in ``failed``: the whole of it is);
- ``backoff``: the wait between those checks and the retry its supervisor decided (a stop and a later
  ``pippa resume``, or a move, bill nothing in between: no attempt ran).

Every second of an attempt, of its checks and of a backoff falls in exactly one part, so the parts add
up to the run's billed time times its price.

Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

PARTS = ("productive", "start-up", "stalled", "failed", "backoff", "health", "checkpoint")
GOOD = ("completed", "stopped", "budget", None)  # an attempt still running has no class yet
ALERT_AT = 0.8  # the share of the budget at which the run's alert is sent
_BUDGET = re.compile(r"^\s*(?:([A-Z]{3})\s*|([^\sA-Za-z0-9.+-]{1,3})\s*)?(\d+(?:\.\d+)?)\s*$")


def parse_budget(text: str) -> float:
    """``"$300"``, ``"300"``, ``"EUR 300"``, ``"€12.5"`` -> the amount; ValueError for anything else
    (``"lots"``, a negative or zero amount)."""
    m = _BUDGET.match(text or "")
    if m is None or float(m.group(3)) <= 0:
        raise ValueError(f'a budget is an amount like "$300" or "300", not {text!r}')
    return float(m.group(3))


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ledger(attempts: Sequence[dict[str, Any]], step_times: Sequence[float], now: float) -> dict[str, float]:
    """Money per part (``PARTS``) of the attempts (attempts.json's list, oldest first), the step rows'
    times of the run, and now (for an attempt still running)."""
    out = dict.fromkeys(PARTS, 0.0)
    steps = sorted(step_times)
    for i, a in enumerate(attempts):
        start, price = _num(a.get("start")), _num(a.get("price_s"))
        if start is None or price is None:
            continue
        end = _num(a.get("end"))
        end = now if end is None else end
        inside = [t for t in steps if start <= t <= end]
        first_t, last_t = _num(a.get("first_step_t")), _num(a.get("last_step_t"))  # recorded at its end
        if first_t is not None and last_t is not None and not inside:
            inside = [first_t, last_t]
        elif not inside and a.get("end") is None:
            inside = [start, end]  # still running, its steps not read here: counted as productive
        first = inside[0] if inside else end
        last = inside[-1] if inside else start
        cls = a.get("class")
        if cls not in GOOD and cls != "stalled":
            out["failed"] += (end - start) * price
        else:
            stalled = end - max(last, first) if cls == "stalled" else 0.0
            out["start-up"] += (first - start) * price
            out["stalled"] += max(0.0, stalled) * price
            productive = max(0.0, end - first - max(0.0, stalled))
            saving = min(productive, max(0.0, _num(a.get("save_s")) or 0.0))
            out["checkpoint"] += saving * price
            out["productive"] += (productive - saving) * price
        checked = max(end, _num(a.get("checked_at")) or end) if a.get("end") is not None else end
        out["health"] += (checked - end) * price
        following = attempts[i + 1] if i + 1 < len(attempts) else None
        raw = a.get("decision")
        decision: dict[str, Any] = raw if isinstance(raw, dict) else {}
        nxt = _num(following.get("start")) if following else None
        if nxt is not None and decision.get("retry") and nxt > checked:
            out["backoff"] += (nxt - checked) * price
    return out


def spent(attempts: Sequence[dict[str, Any]], now: float) -> float:
    """The money the run's attempts and backoffs cost so far (the ledger's total, without the steps)."""
    return sum(ledger(attempts, (), now).values())


def spent_since(attempts: Sequence[dict[str, Any]], since: float, now: float) -> float:
    """What the attempts (and their backoffs) cost after ``since`` (a host's day, for ``daily_budget``)."""
    clipped = []
    for a in attempts:
        start, end = _num(a.get("start")), _num(a.get("end"))
        if start is None or (end is not None and end <= since):
            continue
        clipped.append({**a, "start": max(start, since)})
    return spent(clipped, now)
