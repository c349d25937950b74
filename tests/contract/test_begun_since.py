"""When a run's start-up is over (``LastRecords.begun_since``): what ``pippa run`` and ``pippa resume``
wait for. A resumed run's older lines do not count; a header with its end line is a failed start."""

from __future__ import annotations

import json

from pippa_contract.metrics import LastRecords


def _read(*records: dict[str, object]) -> LastRecords:
    last = LastRecords()
    last.feed("".join(json.dumps(r) + "\n" for r in records).encode())
    return last


def test_a_header_of_this_stretch_is_its_first_line() -> None:
    assert _read({"type": "header", "time": 1000.5}).begun_since(1000)
    assert not _read({"type": "header", "time": 1000.5}).begun_since(None)  # not started yet


def test_a_header_with_its_end_line_is_a_failed_start_not_a_start() -> None:
    last = _read({"type": "header", "time": 1000.5}, {"type": "end", "status": "failed", "time": 1000.6})
    assert not last.begun_since(1000)


def test_a_resumed_runs_older_lines_do_not_count() -> None:
    old = ({"type": "header", "time": 500.0}, {"type": "step", "step": 1, "time": 510.0})
    assert not _read(*old).begun_since(1000)  # superseded end line gone, new header not yet written
    assert _read(*old, {"type": "header", "time": 1001.0}).begun_since(1000)
    assert _read({"type": "step", "step": 40, "time": 1200.0}).begun_since(1000)  # header out of the tail
