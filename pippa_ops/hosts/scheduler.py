"""How a host runs jobs: in tmux (the default) or as SLURM batch jobs from a login node.

A host entry with ``scheduler = "slurm"`` and a ``[hosts.NAME.slurm]`` table (partition, account,
time, nodes, gpus_per_node, cpus_per_task; signal_s, extra, template, container_image) submits each run
with sbatch (``runs.launching.slurm``); ``--nodes`` on ``pippa run`` overrides the table's node count.
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
# one #SBATCH line of ``extra``: a flag and its value, nothing a shell or sbatch would read further
_SBATCH_RE = re.compile(r"^#SBATCH --?[A-Za-z][A-Za-z0-9-]*(?:[= ][A-Za-z0-9_.:,@+/=%-]{1,200})?$")
# a container image for Pyxis (srun --container-image): registry/name:tag, name@sha256:..., a .sqsh path
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+#-]{0,255}$")
# where pippa's parts go in a cluster's own job template (``template``)
TEMPLATE_PARTS = ("{{pippa_sbatch}}", "{{pippa_job}}")


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
    # seconds before the time limit SLURM sends the job USR1 (``--signal=B:USR1@N``): the trainer saves and
    # the job requeues itself (class timelimit, no --retry spent); 0 = none. 90 s: a save of an 8B model
    # state on a shared file system, with room for SLURM's own up-to-60 s lateness in signalling.
    signal_s: int = 90
    extra: tuple[str, ...] = ()  # more "#SBATCH ..." lines, as written (e.g. "#SBATCH --qos=high")
    template: str = ""  # the cluster's own job template file (laptop path), with TEMPLATE_PARTS in it
    container_image: str = ""  # srun --container-image (Pyxis): every task runs in that image

    def check(self) -> None:
        for name in ("partition", "account", "time"):
            value = getattr(self, name)
            if value and not _WORD_RE.match(value):
                raise UsageError(f"bad slurm {name} {value!r}")
        for name in ("nodes", "tasks_per_node"):
            if getattr(self, name) < 1:
                raise UsageError(f"bad slurm {name}: must be >= 1")
        if self.gpus_per_node < 0 or self.cpus_per_task < 0 or self.signal_s < 0:
            raise UsageError("bad slurm gpus_per_node / cpus_per_task / signal_s: must be >= 0")
        for line in self.extra:
            if not _SBATCH_RE.match(line):
                raise UsageError(f"bad slurm extra line {line!r}: not one '#SBATCH --flag[=value]' line")
        if self.container_image and not _IMAGE_RE.match(self.container_image):
            raise UsageError(f"bad slurm container_image {self.container_image!r}")
        if self.template:
            template_text(self.template)


def template_text(path: str) -> str:
    """The cluster's job template at ``path`` (``~`` expanded); refused in one line when it cannot be
    read, is not a script, or lacks one of pippa's parts."""
    from pathlib import Path

    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"slurm template {path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UsageError(f"slurm template {path}: cannot be read (not UTF-8 text)") from None
    missing = [part for part in TEMPLATE_PARTS if text.count(part) != 1]
    if missing:
        raise UsageError(f"slurm template {path}: needs {missing[0]} exactly once (pippa's part goes there)")
    if not text.startswith("#!"):
        raise UsageError(f"slurm template {path}: must start with a #! line")
    return text


def slurm_spec(table: Mapping[str, Any], where: str) -> SlurmSpec:
    """A ``[hosts.NAME.slurm]`` table as a checked SlurmSpec."""
    if not isinstance(table, Mapping):
        raise UsageError(f"{where}.slurm must be a table")
    known = {f.name: f.type for f in fields(SlurmSpec)}
    values = known_only(table, known, f"{where}.slurm")
    for key, value in list(values.items()):
        if key == "extra":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"{where}.slurm.extra must be a list of '#SBATCH ...' strings")
            values[key] = tuple(value)
            continue
        want = int if known[key] == "int" else str
        if not isinstance(value, want) or isinstance(value, bool):
            raise UsageError(f"{where}.slurm.{key} must be {'an integer' if want is int else 'a string'}")
    spec = SlurmSpec(**values)
    try:
        spec.check()
    except UsageError as e:
        raise UsageError(f"{where}.slurm: {e}") from None
    return spec
