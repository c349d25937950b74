"""The goodput ledger (pippa_contract.ledger) on a fake clock: a run that crashed and was retried after a
backoff, stalled, was stopped and resumed later, moved to a host at another price, and was lost to a
reboot and recovered. Its parts add up to its billed time x price within 0.1%, and each part is where
its seconds went."""

from __future__ import annotations

import pytest

from pippa_contract.ledger import ALERT_AT, ledger, parse_budget, spent

A, B = 10.0 / 3600, 30.0 / 3600  # $10/h on the first host, $30/h on the one it moved to


def _attempt(
    start: float,
    end: float | None,
    cls: str | None,
    price: float,
    first: float | None = None,
    last: float | None = None,
    retry: bool = False,
) -> dict[str, object]:
    a: dict[str, object] = {
        "start": start,
        "end": end,
        "class": cls,
        "price_s": price,
        "decision": {"retry": retry},
    }
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


def _checked(
    a: dict[str, object], checked_at: float | None = None, save_s: float | None = None
) -> dict[str, object]:
    return {
        **a,
        **({} if checked_at is None else {"checked_at": checked_at}),
        **({} if save_s is None else {"save_s": save_s}),
    }


# The same run with its supervisor's checks after each attempt (checked_at) and the checkpoint writes the
# trainer timed (save_s); the fifth attempt's supervisor recorded neither (a run from before them).
CHECKED = [
    _checked(RUN[0], 610),  # 10 s of checks, then 20 s of backoff
    _checked(RUN[1], 2005),  # 5 s, then 55 s
    _checked(RUN[2], 3002, save_s=40),  # 2 s of checks after a stop (billed: the host ran them)
    _checked(RUN[3], 7010, save_s=20),  # a lost attempt's save stays in failed, as the whole of it
    RUN[4],
    _checked(RUN[5], 12001, save_s=100),
]


def test_health_checks_and_checkpoint_writes_are_split_out_and_it_still_adds_up() -> None:
    parts = ledger(CHECKED, (), now=20000)
    billed = (600 + 1370 + 940 + 400 + 400) * A + 3000 * B  # the attempts
    billed += (10 + 5 + 2 + 10) * A + 1 * B  # their checks
    billed += (20 + 55 + 90) * A  # the backoffs after the checks
    assert sum(parts.values()) == pytest.approx(billed, rel=1e-3)
    assert parts["health"] == pytest.approx(27 * A + 1 * B)
    assert parts["backoff"] == pytest.approx(165 * A)
    assert parts["checkpoint"] == pytest.approx(40 * A + 100 * B)
    assert parts["productive"] == pytest.approx((700 + 860 + 350) * A + 2700 * B)
    assert parts["failed"] == pytest.approx((600 + 400) * A)
    assert parts["stalled"] == pytest.approx(600 * A)
    assert parts["start-up"] == pytest.approx((70 + 40 + 50) * A + 200 * B)
    assert spent(CHECKED, 20000) == pytest.approx(billed, rel=1e-3)
