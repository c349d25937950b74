"""`pippa hosts`: who answers, each host checked in parallel.

Names that reach the same SSH endpoint (an inventory entry and a ~/.ssh/config alias of the same
machine: user@address:port, the same keys (by content: two paths to one key are one key) and hops)
are checked once: one connection, and the rows share its answer. Each name still gets its own row,
its own python check and its own remote dir's doctor verdict. The python checks and the alerts
status are one command (one channel), the doctor verdict one agent request.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pippa_ops.alerts.commands import program_command
from pippa_ops.doctor import last_summary
from pippa_ops.errors import HostUnreachable, PippaError, refused_as
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.provision import alerts
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import sh_path


@dataclass(frozen=True)
class HostRow:
    """One line of `pippa hosts`."""

    name: str
    address: str
    user: str | None
    port: int | None
    source: str
    remote_dir: str
    reachable: bool
    latency_ms: float | None
    error: str | None
    origins: dict[str, str] = field(default_factory=dict)  # field -> hosts.toml | ssh_config | pippa.toml
    python_missing: str | None = None  # the host's python setting, when the host has no such program
    alerts: dict[str, object] | None = None  # the host's alerts status (pippa_agent.alerts status)
    down_as: str = "down"  # not up: "key unknown" (it answered), "auth failed", ... (errors.refused_as)
    doctor: dict[str, object] | None = None  # its last `pippa doctor` verdict (pippa_ops.doctor.last_summary)

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Answer:
    """One endpoint's answer, shared by every name that reaches it."""

    latency_ms: float
    missing: frozenset[str]  # python settings the host lacks
    status: dict[str, object] | None
    doctor: dict[str, dict[str, object] | None]  # remote dir -> its last doctor summary


def same_host_key(spec: HostSpec) -> str:
    """Names with the same key are one SSH connection to one account: the endpoint without its name
    (an unresolvable spec keys by its name, and its check then says why)."""
    if spec.is_local:
        return "local"
    from pippa_ops.hosts.endpoint import endpoint

    try:
        ep = endpoint(spec)
    except PippaError:
        return f"name:{spec.name}"
    return json.dumps(replace(ep, name="", identity_files=tuple(map(_key_id, ep.identity_files))).as_json())


def _key_id(path: str) -> str:
    """A digest of the key file's bytes (never shown or kept), or its path when unreadable."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return path


def survey(
    specs: list[HostSpec], open_transport: Callable[[HostSpec], Transport], timeout: float = 5.0
) -> list[HostRow]:
    """Every host of the inventory with reachability checked in parallel (one bad host stops none)."""
    keys = {s.name: same_host_key(s) for s in specs}
    groups: dict[str, list[HostSpec]] = {}
    for spec in specs:
        groups.setdefault(keys[spec.name], []).append(spec)

    def check(key: str) -> _Answer:
        group = groups[key]
        first = group[0]
        t0 = time.monotonic()
        if first.is_local and all(s.python is None for s in group):
            return _Answer(0.0, frozenset(), None, {})
        pythons = list(dict.fromkeys(s.python for s in group if s.python))
        with open_transport(first) as t:
            try:  # the status part exits 3 where alerts were never set up: its line says so
                r = t.run(survey_line(pythons, status=not first.is_local), timeout=timeout, check=False)
            except TimeoutError as e:
                raise HostUnreachable(f"{first.name}: no answer within {timeout:.0f}s") from e
            lines = r.stdout.splitlines()
            said = dict(zip(pythons, lines, strict=False))  # a line per python setting, then the status
            missing = frozenset(p for p, word in said.items() if word.strip() == "missing")
            latency = (time.monotonic() - t0) * 1000
            status = None if first.is_local else alerts.status_of("\n".join(lines[len(pythons) :]))
            by_dir = {s.remote_dir: s for s in group}
            doctor = {d: last_summary(s, t) for d, s in by_dir.items()}
            return _Answer(latency, missing, status, doctor)

    results = fan_out(list(groups), check)
    rows = []
    for spec in specs:
        res = results[keys[spec.name]]
        ok = isinstance(res, _Answer)
        lacks = isinstance(res, _Answer) and spec.python in res.missing
        rows.append(
            HostRow(
                name=spec.name,
                address=spec.address or "this machine",
                user=spec.user,
                port=spec.port,
                source=spec.source,
                remote_dir=spec.remote_dir,
                reachable=ok,
                latency_ms=round(res.latency_ms, 1) if isinstance(res, _Answer) else None,
                error=None if ok else str(res),
                origins=dict(spec.origins),
                python_missing=spec.python if lacks else None,
                alerts=alerts.with_rate(res.status, spec) if isinstance(res, _Answer) else None,
                down_as=(refused_as(res) or "down") if isinstance(res, PippaError) else "down",
                doctor=res.doctor.get(spec.remote_dir) if isinstance(res, _Answer) else None,
            )
        )
    return rows


def survey_line(pythons: list[str], status: bool) -> str:
    """The reachability check's one command: for each ``python`` setting, a line ``ok`` or ``missing``
    (the host has no such program: its first word, a path or a name on PATH); then, with ``status``,
    the alerts status (``alerts.host_status``)."""
    checks = []
    for python in pythons:
        first = shlex.split(python)[0]
        word = sh_path(first)
        found = f"test -f {word} && test -x {word}" if "/" in first else f"command -v {word} >/dev/null 2>&1"
        checks.append(f"if {found}; then echo ok; else echo missing; fi")
    if status:
        checks.append(program_command("status"))
    return "; ".join(checks) or "true"
