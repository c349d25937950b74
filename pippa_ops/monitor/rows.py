"""The dashboard's run rows: a host's listed runs as rows, with the stale copies flagged.

A run that ``--failover`` moved on goes on on the new host; its old host, back on the network, may
still list its copy as running. ``ps`` flags that copy ``stale copy (moved to HOST2)`` from the
listings of every host (runs.moving.stale); the dashboard's monitors each list one host, so they share one
``Copies``: every poll hands in its host's listing and gets it back with the stale copies among all
the hosts' latest listings flagged, the same state text as ``ps``.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from pippa_ops.monitor.state import RunRow
from pippa_ops.runs.moving.stale import stale_copies
from pippa_ops.runs.records.listing import HostRuns, RunRecord


def run_row(r: RunRecord, now: float) -> RunRow:
    elapsed = r.duration_s if r.duration_s is not None else (now - r.started if r.started else None)
    return RunRow(
        r.run_id, r.label, r.state_text, r.session, r.last_step, r.last_reward, elapsed, r.cost, r.currency
    )


class Copies:
    """The latest listing of each host of one dashboard (thread-safe: one monitor thread per host)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listings: dict[str, HostRuns] = {}

    def flag(self, listing: HostRuns) -> HostRuns:
        """``listing`` kept as its host's latest, returned with its stale copies' ``stale_of`` set."""
        with self._lock:
            self._listings[listing.host] = listing
            now = dict(self._listings)
        stale = {s.record.run_id: s.live_host for s in stale_copies(now) if s.record.host == listing.host}
        if not stale:
            return listing
        runs = tuple(replace(r, stale_of=stale[r.run_id]) if r.run_id in stale else r for r in listing.runs)
        return replace(listing, runs=runs)
