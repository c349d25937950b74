"""What a run has cost so far: its elapsed time x the host's rate x its share of the host's GPUs.

The formula is pippa_contract.alerts.cost_so_far, the one the host's messages use. A host without
``cost_per_hour`` or ``cost_per_gpu_hour`` prices nothing (None, never a made-up zero). The host's GPU
count, which a share needs, is what `pippa up` recorded there; it is read only when a run needs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from pippa_contract.alerts import cost_so_far, run_gpus
from pippa_contract.alerts import money as money  # re-exported: how a cost reads
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.records.follow import read_all
from pippa_ops.runs.records.listing import HostRuns, RunRecord
from pippa_ops.transport.base import Transport


def has_rate(spec: HostSpec) -> bool:
    return spec.cost_per_hour is not None or spec.cost_per_gpu_hour is not None


def needs_host_gpus(spec: HostSpec, record: RunRecord) -> bool:
    """Whether pricing this run needs the host's GPU count (a share of a whole-host rate, or all
    GPUs at a per-GPU rate)."""
    asked = run_gpus(record.command)
    return (spec.cost_per_hour is not None and asked is not None) or (
        spec.cost_per_gpu_hour is not None and asked is None
    )


def run_cost(spec: HostSpec, record: RunRecord, host_gpus: int | None) -> float | None:
    cost = cost_so_far(
        record.duration_s, spec.cost_per_hour, spec.cost_per_gpu_hour, run_gpus(record.command), host_gpus
    )
    return None if cost is None else round(cost, 4)


def host_gpus(transport: Transport) -> int | None:
    """The host's GPU count as `pippa up` recorded it (the cost of a run on some of them needs it)."""
    try:
        cfg = json.loads(read_all(transport, f"{ALERTS_DIR}/{ALERTS_CONFIG}") or b"null")
    except ValueError:
        return None
    n = cfg.get("gpus") if isinstance(cfg, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def priced(spec: HostSpec, runs: HostRuns, gpu_count: Callable[[], int | None]) -> HostRuns:
    """``runs`` with each record's ``cost`` set (where the host has a rate); ``gpu_count`` is asked
    at most once, and only when a run's share needs it."""
    if not has_rate(spec) or not runs.runs:
        return runs
    gpus = gpu_count() if any(needs_host_gpus(spec, r) for r in runs.runs) else None
    return replace(
        runs, runs=tuple(replace(r, cost=run_cost(spec, r, gpus), currency=spec.currency) for r in runs.runs)
    )


def priced_on(spec: HostSpec, transport: Transport, runs: HostRuns) -> HostRuns:
    """``priced`` with the host's GPU count read from the host (over ``transport``) when needed."""
    return priced(spec, runs, lambda: host_gpus(transport))


class Prices:
    """Pricing for a poller that lists one host's runs again and again (the dashboard): the host's GPU
    count, when a share needs it, is read once per monitor."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self._gpus: int | None = None
        self._asked = False

    def priced(self, runs: HostRuns, transport: Transport) -> HostRuns:
        def gpus() -> int | None:
            if not self._asked:
                self._gpus, self._asked = host_gpus(transport), True
            return self._gpus

        return priced(self.spec, runs, gpus)


def goodput(spend: dict[str, float] | None) -> str:
    """``85% productive``: the ledger's productive share (pippa_contract.ledger); "" without a ledger."""
    total = sum(spend.values()) if spend else 0.0
    return f"{100 * spend['productive'] / total:.0f}% productive" if spend and total > 0 else ""


def per_eval_point(
    cost: float | None, evals: Mapping[str, Sequence[tuple[int, float]]], last_step: int | None
) -> float | None:
    """The cost to reach the best eval (the cost so far x the best eval's step / the last step), per
    point of it (an accuracy or pass rate in %); None without a cost or an accuracy-like eval."""
    best = max(
        ((v, s) for k, pts in evals.items() if k.endswith(("accuracy", "pass_rate")) for s, v in pts),
        default=None,
    )
    if cost is None or best is None or best[0] <= 0 or not last_step:
        return None
    return cost * min(1.0, best[1] / last_step) / (100 * best[0])
