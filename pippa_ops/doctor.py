"""`pippa doctor`'s core: one agent request per host (``verbs.doctor``), hosts in parallel, the history
the host keeps, and the last verdict `pippa run`, `up` and `hosts` read. No typer, no rich."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pippa_contract import verbs
from pippa_contract.doctor import FAIL, FAIL_MAX_AGE_S, failed
from pippa_ops.errors import PippaError, UsageError
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport

if TYPE_CHECKING:
    from pippa_contract.messages import DoctorRequest, DoctorResult

QUICK_TIMEOUT_S = 120.0
FULL_TIMEOUT_S = 400.0  # the active checks' own bound (150 s) plus the passive ones and torch's import


def training_python(spec: HostSpec) -> list[str]:
    """The host's training python; for ``local`` without a .venv, the python running pippa."""
    from pippa_ops.runs.launching.precheck import python_argv  # its imports (run listing) only where asked

    argv = python_argv(spec.python, spec.remote_dir)
    if spec.is_local and not spec.python and not os.path.exists(argv[0]):
        return [sys.executable]
    return argv


# a host named like a GPU box: its missing NVIDIA driver fails the doctor even without gpus = N
GPU_NAME = re.compile(r"(?i)(?<![a-z0-9])(gpu|[abhv]100|[hb]200|a10g?|a40|l40s?|l4|t4|rtx\w*|a6000)(?![a-z])")


def request(
    spec: HostSpec, quick: bool, smi_timeout: float | None = None, shm_dir: str | None = None
) -> DoctorRequest:
    req: DoctorRequest = {
        "host": spec.name,
        "remote_dir": spec.remote_dir,
        "python": training_python(spec),
        "env": dict(spec.env),
        "expected_gpus": spec.gpus,
        "quick": quick,
    }
    named = GPU_NAME.search(f"{spec.name} {spec.address or ''}") if spec.gpus is None else None
    if named:
        req["gpu_named"] = named.group(0)
    if smi_timeout is not None:
        req["smi_timeout"] = smi_timeout
    if shm_dir is not None:
        req["shm_dir"] = shm_dir
    return req


def check_host(
    spec: HostSpec,
    transport: Transport,
    quick: bool,
    *,
    smi_timeout: float | None = None,
    shm_dir: str | None = None,
) -> DoctorResult:
    """The host's checks and verdict (stored on the host too)."""
    req = request(spec, quick, smi_timeout, shm_dir)
    res = verbs.doctor(
        agent_client.Once(transport), req, timeout=QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S
    )
    res["host"] = spec.name
    return res


def history(spec: HostSpec, transport: Transport, limit: int = 10) -> list[DoctorResult]:
    return list(
        verbs.doctor_history(agent_client.Once(transport), spec.remote_dir, limit).get("results") or []
    )


def last_result(spec: HostSpec, transport: Transport) -> DoctorResult | None:
    found = history(spec, transport, 1)
    return found[0] if found else None


def last_summary(spec: HostSpec, transport: Transport) -> dict[str, object] | None:
    """``{"verdict", "time", "failed"}`` of the host's newest doctor result (`pippa hosts`), or None:
    none stored, or the host cannot say (an old agent, a remote_dir it cannot read)."""
    try:
        res = last_result(spec, transport)
    except PippaError:
        return None
    if res is None:
        return None
    bad = sorted({str(c.get("check")) for c in failed(res)})
    return {"verdict": res.get("verdict"), "time": res.get("time"), "failed": bad}


def summary_text(summary: dict[str, object], now: float | None = None) -> str:
    """``doctor fail (xid, ecc) 3h ago``: a host's last verdict for `pippa hosts`."""
    failed_names = summary.get("failed") or []
    bad = f" ({', '.join(map(str, failed_names))})" if isinstance(failed_names, list) and failed_names else ""
    stamp = summary.get("time")
    ago = age((now or time.time()) - stamp) if isinstance(stamp, (int, float)) else "?"
    return f"doctor {summary.get('verdict')}{bad} {ago} ago"


@dataclass(frozen=True)
class Refusal:
    """Why `pippa run` will not start on a host: its recent doctor verdict was fail."""

    host: str
    checks: tuple[str, ...]
    age_s: float
    source: str = "doctor"  # "watcher": a GPU fault the host's alert watcher saw during a run

    def line(self) -> str:
        names = ", ".join(self.checks) or "a check"
        when = age(self.age_s)
        if self.source == "watcher":
            what = f"its alert watcher saw a GPU fault ({names}) {when} ago"
        else:
            what = f"its last `pippa doctor` ({when} ago) failed {names}"
        fix = f"fix the box and run `pippa doctor {self.host}` again, or start anyway with --force"
        return f"{self.host}: {what}: {fix}"


def refusal(res: DoctorResult | None, now: float | None = None) -> Refusal | None:
    """A Refusal when ``res`` is a fail younger than a day; else None."""
    if res is None or res.get("verdict") != FAIL:
        return None
    age_s = (now if now is not None else time.time()) - float(res.get("time") or 0.0)
    if age_s > FAIL_MAX_AGE_S:
        return None
    names = tuple(dict.fromkeys(str(c.get("check")) for c in failed(res)))
    return Refusal(str(res.get("host") or ""), names, max(0.0, age_s), str(res.get("source") or "doctor"))


def age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def check_hosts(
    specs: Sequence[HostSpec], open_transport: object, quick: bool
) -> dict[str, DoctorResult | PippaError]:
    """Every host at once; an unreachable host is its error, the others still answer."""
    if not specs:
        raise UsageError("no hosts: name one (or `local`), or add hosts to the inventory")
    by_name = {s.name: s for s in specs}

    def one(name: str) -> DoctorResult:
        spec = by_name[name]
        with open_transport(spec) as transport:  # type: ignore[operator]
            return check_host(spec, transport, quick)

    return fan_out(list(by_name), one)
