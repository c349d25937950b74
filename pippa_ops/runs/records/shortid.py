"""Short run ids, the way git shortens hashes: what a table shows and every verb accepts.

A run id is ``YYYYmmdd-HHMMSS-<label>-<4 hex>`` (docs/CONTRACTS.md). Its short form is the random hex
tail when that is unique among the runs at hand, else ``<label>-<hex>``, else the whole id. A name a
user types designates a run when it is the whole id, a unique prefix of it (4 characters or more), or
its tail after a dash (the hex, or label-hex).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pippa_contract.runpick import MIN_PREFIX, designates  # the rule the agent follows too

__all__ = ["MIN_PREFIX", "designates", "short_ids"]


def _tails(run_id: str) -> list[str]:
    """The dash-separated tails of an id, shortest first: ``a3f9``, ``tiny-a3f9``, ..."""
    parts = run_id.split("-")
    return ["-".join(parts[i:]) for i in range(len(parts) - 1, 0, -1)]


def short_ids(run_ids: Iterable[str]) -> dict[str, str]:
    """Each id's shortest tail that no other of ``run_ids`` shares (the whole id when none)."""
    ids = list(dict.fromkeys(run_ids))
    counts = Counter(t for rid in ids for t in set(_tails(rid)))
    out = {}
    for rid in ids:
        out[rid] = next((t for t in _tails(rid) if counts[t] == 1 and len(t) >= MIN_PREFIX), rid)
    return out
