"""``pippa compare``: several runs' metrics files, wherever they are, read into comparable values.

A run that was pulled and had ended is read from its copy (an ended run's files do not change, and
no host needs to answer); any other run from its host, found with one listing per host
(``runs.moving.locate``), one ``read`` round trip per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pippa_contract import rundir as rd
from pippa_contract.rundir import RunDir
from pippa_ops.errors import UsageError
from pippa_ops.hosts.connect import connect
from pippa_ops.runs.moving.locate import locate
from pippa_ops.runs.reading.curves import Curves, Points, config_diff, parse_metrics
from pippa_ops.runs.records.cost import per_eval_point
from pippa_ops.runs.records.follow import read_all
from pippa_ops.transport.shell import NAME_RE

DEFAULT_METRICS = ("reward/mean",)


@dataclass(frozen=True)
class LoadedRun:
    run_id: str
    host: str
    source: str  # "pulled" (the local copy's path) or "host"
    where: str
    curves: Curves
    cost: float | None = None  # so far, at its host's rate (runs.records.cost); None: no rate or a copy
    currency: str | None = None  # the rate's currency (HostSpec.currency)
    spend: dict[str, float] | None = None  # its goodput ledger (pippa_contract.ledger), where priced

    def summary(self) -> dict[str, Any]:
        last = max((p[0] for pts in self.curves.steps.values() for p in pts), default=None)
        reward = self.curves.series("reward/mean")
        evals = {k: v[-1][1] for k, v in self.curves.evals.items() if v}
        return {
            "steps": max((p[0] for pts in self.curves.steps.values() for p in pts), default=None),
            "final_reward": reward[-1][1] if reward else None,
            "best_reward": max((p[1] for p in reward), default=None),
            "final_eval": evals or None,
            "end": self.curves.end,
            "cost": self.cost,
            "currency": self.currency,
            "ledger": self.spend,
            "per_eval_point": per_eval_point(self.cost, self.curves.evals, last),
        }


def _pulled(root: Path, run_id: str) -> Path | None:
    """An ended run's local copy (``root/<host>/<run-id>`` with an exit_code), if there is one."""
    if not root.is_dir() or not NAME_RE.fullmatch(run_id):
        return None
    for d in sorted(root.glob(f"*/{run_id}")):
        if (d / rd.EXIT_CODE).is_file() and (d / rd.METRICS).is_file():
            return d
    return None


def load_runs(names: Sequence[str], root: Path, host: str | None = None) -> list[LoadedRun]:
    """Each named run's metrics, in the order given (a name twice is an error: the plot would lie)."""
    if len(set(names)) != len(names):
        raise UsageError("a run is named twice")
    if len(names) < 1:
        raise UsageError("name at least one run")
    loaded: dict[str, LoadedRun] = {}
    for name in names:
        copy = None if host else _pulled(root, name)
        if copy is not None:
            curves = parse_metrics((copy / rd.METRICS).read_bytes())
            loaded[name] = LoadedRun(name, copy.parent.name, "pulled", str(copy), curves)
    rest = [n for n in names if n not in loaded]
    if rest:
        records = locate(rest, host)
        by_host: dict[str, list[str]] = {}
        for name, rec in records.items():
            by_host.setdefault(rec.host, []).append(name)
        for h, wanted in by_host.items():
            spec, transport = connect(h)
            with transport:
                for name in wanted:
                    rec = records[name]
                    path = RunDir(spec.remote_dir, rec.run_id).metrics
                    data = read_all(transport, path)
                    loaded[name] = LoadedRun(
                        rec.run_id,
                        spec.name,
                        "host",
                        f"{h}:{path}",
                        parse_metrics(data),
                        rec.cost,
                        rec.currency,
                        rec.spend,
                    )
    return [loaded[n] for n in names]


def metric_points(runs: Sequence[LoadedRun], metric: str) -> dict[str, Points]:
    return {r.run_id: r.curves.series(metric) for r in runs}


# What the trainer detected about its machine (GPU name, free memory, driver): it differs between any
# two runs, so it would bury the settings that were chosen; `compare --all` shows it.
FACTS_PREFIX = "platform.facts."


def legend_labels(runs: Sequence[LoadedRun]) -> dict[str, str]:
    """What a plot calls each run: its recipe and its short id (``tiny a3f9``), as ``ps`` names runs;
    a whole run id in a legend is mostly its date."""
    from pippa_ops.runs.records.shortid import short_ids

    short = short_ids([r.run_id for r in runs])
    return {r.run_id: f"{r.curves.recipe or 'cmd'} {short[r.run_id]}" for r in runs}


def _from_root(config: dict[str, Any]) -> dict[str, Any]:
    """The config with ``recipe_path`` relative to the project root (``recipes/tiny.toml``): the host's
    absolute path differs with its home directory, not with the recipe."""
    path = config.get("recipe_path")
    if not isinstance(path, str) or "recipes" not in PurePosixPath(path).parts:
        return config
    parts = PurePosixPath(path).parts
    at = len(parts) - 1 - parts[::-1].index("recipes")
    return {**config, "recipe_path": str(PurePosixPath(*parts[at:]))}


def differing_config(runs: Sequence[LoadedRun], *, with_facts: bool = False) -> dict[str, dict[str, Any]]:
    """Config keys that differ between the runs (the recipe name included; the platform's detected
    facts only ``with_facts``)."""
    diff = config_diff({r.run_id: {"recipe": r.curves.recipe, **_from_root(r.curves.config)} for r in runs})
    return {k: v for k, v in diff.items() if with_facts or not k.startswith(FACTS_PREFIX)}


def check_metrics(runs: Sequence[LoadedRun], metrics: Sequence[str]) -> None:
    """A metric no run logged is a typo: say which keys there are."""
    for metric in metrics:
        if not any(r.curves.series(metric) for r in runs):
            known = sorted({k for r in runs for k in (*r.curves.steps, *r.curves.evals)})
            listed = ", ".join(known) if known else "none (no metrics yet)"
            raise UsageError(f"no run has {metric!r}; logged keys: {listed}")
