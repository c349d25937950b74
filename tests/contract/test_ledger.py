"""The goodput ledger (pippa_contract.ledger) on a fake clock: a run that crashed and was retried after a
backoff, stalled, was stopped and resumed later, moved to a host at another price, and was lost to a
reboot and recovered. Its parts add up to its billed time x price within 0.1%, and each part is where
its seconds went."""

from __future__ import annotations

import pytest

from pippa_contract.ledger import ALERT_AT, ledger, parse_budget, spent

A, B = 10.0 / 3600, 30.0 / 3600  # $10/h on the first host, $30/h on the one it moved to


def _attempt(start: float, end: float | None, cls: str | None, price: float, first: float | None = None,
             last: float | None = None, retry: bool = False) -> dict[str, object]:  # fmt: skip
    a: dict[str, object] = {"start": start, "end": end, "class": cls, "price_s": price,
                            "decision": {"retry": retry}}  # fmt: skip
    if first is not None:
        a.update(first_step_t=first, last_step_t=last)
    return a


RUN = [
    _attempt(0, 600, "crash", A, 60, 590, retry=True),  # crashed after 10 minutes; 30 s backoff
    _attempt(630, 2000, "stalled", A, 700, 1400, retry=True),  # stalled 600 s after its last step
    _attempt(2060, 3000, "stopped", A, 2100, 2990),  # pippa stop; resumed an hour later (not billed)
    _attempt(6600, 7000, "lost", A, 6660, 6990, retry=True),  # a reboot; recovered 100 s later
    _attempt(7100, 7500, "stopped", A, 7150, 7490),  # stopped, then moved to the other host
    _attempt(9000, 12000, "completed", B, 9200, 11990),  # on the new host, at its price
]


def test_the_ledger_adds_up_to_the_billed_time_at_each_hosts_price() -> None:
    parts = ledger(RUN, (), now=20000)
    billed = (600 + 30 + 1370 + 60 + 940 + 400 + 100 + 400) * A + 3000 * B  # attempts and backoffs only
    assert sum(parts.values()) == pytest.approx(billed, rel=1e-3)
    assert parts["failed"] == pytest.approx((600 + 400) * A)  # the crash and the lost attempt, whole
    assert parts["backoff"] == pytest.approx((30 + 60 + 100) * A)  # the stop -> resume hour is not in it
    assert parts["stalled"] == pytest.approx(600 * A)
    assert parts["start-up"] == pytest.approx((70 + 40 + 50) * A + 200 * B)
    assert parts["productive"] == pytest.approx((700 + 900 + 350) * A + 2800 * B)
    assert spent(RUN, 20000) == pytest.approx(billed, rel=1e-3)


def test_a_running_attempt_bills_up_to_now_and_steps_split_it() -> None:
    going = [_attempt(0, None, None, A)]
    assert ledger(going, (), now=3600)["productive"] == pytest.approx(10.0)  # $10 after an hour
    parts = ledger(going, [600.0, 1200.0], now=3600)
    assert parts["start-up"] == pytest.approx(600 * A) and sum(parts.values()) == pytest.approx(10.0)
    assert ALERT_AT == 0.8


def test_a_budget_is_an_amount_and_lots_is_refused() -> None:
    assert [parse_budget(t) for t in ("$300", "300", "EUR 300", "€12.5", " 7 ")] == [300, 300, 300, 12.5, 7]
    for bad in ("lots", "", "$-3", "0", "300 dollars", "$", "1e9"):
        with pytest.raises(ValueError, match="a budget is an amount"):
            parse_budget(bad)
