"""Health before a launch: `pippa run` refuses a host whose last `pippa doctor` verdict (under a day old)
is fail, unless --force, and says when the GPUs it will use already run another process."""

from __future__ import annotations

import re
from collections.abc import Callable

from pippa_contract import verbs
from pippa_ops import doctor
from pippa_ops.errors import HostUnhealthy
from pippa_ops.gpu import GpuReport, apps_argv, parse_outputs, query_argv
from pippa_ops.hosts.inventory import HostSpec

_IDS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def gpu_ids(spec: str | None) -> set[int] | None:
    """``--gpus`` (``0-6``, ``0,2``) as a set; None: every GPU (training_core.hardware.gpu_ids checks it)."""
    text = (spec or "").replace(" ", "")
    if not text or not _IDS.match(text):
        return None
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def busy_lines(spec: HostSpec, report: GpuReport, gpus: str | None) -> list[str]:
    """One line per target GPU that already runs a compute process (nvidia-smi's own list)."""
    wanted = gpu_ids(gpus)
    out = []
    for g in report.gpus:
        if g.processes and (wanted is None or g.index in wanted):
            procs = ", ".join(
                f"pid {p.pid} {p.name}" + (f" ({p.used_mib:.0f} MiB)" if p.used_mib else "")
                for p in g.processes
            )
            out.append(
                f"{spec.name}: GPU {g.index} already runs {procs}: the new run will share it "
                "(pippa gpus shows them)"
            )
    return out


def preflight(
    spec: HostSpec, agent: verbs.Caller, gpus: str | None, force: bool, warn: Callable[[str], None]
) -> None:
    """Raise HostUnhealthy on a recent fail verdict (unless ``force``); ``warn`` about busy GPUs. Two
    requests on the launch's own agent (no process of their own)."""
    last = verbs.doctor_history(agent, spec.remote_dir, 1).get("results") or []
    refused = doctor.refusal(last[0] if last else None)
    if refused is not None:
        if not force:
            raise HostUnhealthy(refused.line())
        warn(f"pippa: {refused.line()} (--force: starting anyway)")
    if spec.scheduler == "tmux":
        answer = verbs.gpu_report(agent, query_argv(), apps_argv())
        if answer.get("smi"):
            report = parse_outputs(spec.name, answer.get("gpus", ""), answer.get("apps", ""))
            for line in busy_lines(spec, report, gpus):
                warn(f"pippa: warning: {line}")
