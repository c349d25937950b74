"""How a host runs jobs: in tmux (the default) or as SLURM batch jobs from a login node.

A host entry with ``scheduler = "slurm"`` and a ``[hosts.NAME.slurm]`` table (partition, account,
time, nodes, gpus_per_node, cpus_per_task) submits each run with sbatch (``runs.slurm``); ``--nodes``
on ``pippa run`` overrides the table's node count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pippa_ops.errors import UsageError
from pippa_ops.hosts.keys import known_only

SCHEDULERS = ("tmux", "slurm")
_WORD_RE = re.compile(r"^[A-Za-z0-9_.:,@+-]{1,128}$")  # partition, account, time ("1-00:00:00")


def scheduler_setting(entry: Mapping[str, Any], where: str) -> tuple[str, SlurmSpec | None]:
    """A host entry's ``scheduler`` and, for SLURM, its ``[slurm]`` table (refused elsewhere)."""
    scheduler = entry.get("scheduler", "tmux")
    if scheduler not in SCHEDULERS:
        raise UsageError(f"{where}.scheduler must be one of {', '.join(SCHEDULERS)}, not {scheduler!r}")
    batch = scheduler == "slurm"
    if "slurm" in entry and not batch:
        raise UsageError(f'{where} has a slurm table but scheduler is not "slurm"')
    return scheduler, slurm_spec(entry.get("slurm", {}), where) if batch else None


@dataclass(frozen=True)
class SlurmSpec:
    """What the cluster is asked for."""

    partition: str = ""  # "" = the cluster's default partition
    account: str = ""  # "" = the user's default account
    time: str = ""  # sbatch --time, e.g. "04:00:00"; "" = the partition's limit
    nodes: int = 1
    gpus_per_node: int = 0  # --gres=gpu:N on every node; 0 = none requested
    cpus_per_task: int = 0  # 0 = the cluster's default
    tasks_per_node: int = 1  # launchers per node: 1 (each starts one rank per GPU); >1 only rehearses

    def check(self) -> None:
        for name in ("partition", "account", "time"):
            value = getattr(self, name)
            if value and not _WORD_RE.match(value):
                raise UsageError(f"bad slurm {name} {value!r}")
        for name in ("nodes", "tasks_per_node"):
            if getattr(self, name) < 1:
                raise UsageError(f"bad slurm {name}: must be >= 1")
        if self.gpus_per_node < 0 or self.cpus_per_task < 0:
            raise UsageError("bad slurm gpus_per_node / cpus_per_task: must be >= 0")


def slurm_spec(table: Mapping[str, Any], where: str) -> SlurmSpec:
    """A ``[hosts.NAME.slurm]`` table as a checked SlurmSpec."""
    if not isinstance(table, Mapping):
        raise UsageError(f"{where}.slurm must be a table")
    known = {f.name: f.type for f in fields(SlurmSpec)}
    table = known_only(table, known, f"{where}.slurm")
    for key, value in table.items():
        want = int if known[key] == "int" else str
        if not isinstance(value, want) or isinstance(value, bool):
            raise UsageError(f"{where}.slurm.{key} must be {'an integer' if want is int else 'a string'}")
    spec = SlurmSpec(**dict(table))
    spec.check()
    return spec
