"""``pippa run --failover h100-b,h100-c``: a run whose host failed it moves on its own to the first healthy
host of the list, in the same run id (``runs.moving.move``), taken by the laptop when ``pippa wait`` (and
so the background watcher of ``run --notify``) sees it.

Moves on: a run whose last attempt ended in ``gpu-fault`` (the supervisor never retries one on that host),
and a run whose host stayed unreachable for ``PIPPA_FAILOVER_AFTER_S`` (default 600 s) while waited for
(it then moves from the laptop's pulled copy, as ``pippa resume --on`` does). Healthy: the host answers
and its last stored ``pippa doctor`` verdict is not ``fail``; a host with no verdict yet is allowed
(untried, not refused). The move is recorded in the new host's run.json (``failover``) and said in a
line and a notification, never silently.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pippa_contract import failures as fc
from pippa_contract import rundir as rd
from pippa_contract import states, verbs
from pippa_ops.errors import BadSetting, PippaError, UnknownHost
from pippa_ops.runs.records.listing import RunRecord

AFTER_S_ENV = "PIPPA_FAILOVER_AFTER_S"
AFTER_S = 600.0


class NoHealthyHost(PippaError):
    """Every --failover host is unreachable or failed its last doctor check."""


def failover_hosts(text: str | None, is_cmd: bool) -> tuple[str, ...]:
    """``--failover``'s hosts, each one known (none when not given)."""
    if not text:
        return ()
    from pippa_ops.runs.moving.locate import all_hosts

    hosts = tuple(dict.fromkeys(h.strip() for h in text.split(",") if h.strip()))
    if not hosts:
        raise BadSetting(f"bad --failover {text!r}: name hosts, e.g. h100-b,h100-c")
    if is_cmd:
        raise BadSetting("--failover moves a recipe run's checkpoint: a --cmd run has none")
    known = all_hosts()
    for h in hosts:
        if h not in known:
            raise UnknownHost(f"unknown host {h!r} in --failover (see `pippa hosts`)")
    return hosts


def after_s() -> float:
    try:
        return max(0.0, float(os.environ.get(AFTER_S_ENV, AFTER_S)))
    except ValueError:
        return AFTER_S


def due(rec: RunRecord) -> str | None:
    """Why ``rec`` should fail over now (its last attempt's class and reason), or None."""
    if not rec.failover or rec.active or rec.state == states.MOVED:
        return None
    doc = rec.attempts_doc if isinstance(rec.attempts_doc, dict) else {}
    raw = doc.get("attempts")
    last = raw[-1] if isinstance(raw, list) and raw and isinstance(raw[-1], dict) else {}
    if last.get("class") == fc.GPU_FAULT:
        return fc.label(fc.GPU_FAULT, last.get("reason"))
    return None


def pick_host(candidates: tuple[str, ...], exclude: str) -> tuple[str, str]:
    """The first healthy host of ``candidates`` (not ``exclude``) and what its doctor said."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.transport import agent_client

    skipped = []
    for host in candidates:
        if host == exclude:
            continue
        try:
            spec, transport = connect(host)
            with transport:
                last = verbs.doctor_history(agent_client.Once(transport), spec.remote_dir, 1).get("results")
        except PippaError as e:
            skipped.append(f"{host} ({str(e).splitlines()[0]})")
            continue
        res: dict[str, Any] = dict(last[0]) if last else {}
        verdict = str(res.get("verdict") or "")
        if verdict == "fail":
            skipped.append(f"{host} (its last doctor verdict is fail)")
            continue
        return host, f"doctor: {verdict}" if verdict else "no doctor verdict yet"
    raise NoHealthyHost("no healthy --failover host: " + (", ".join(skipped) or "none but the run's own"))


def fail_over(rec: RunRecord, why: str, runs_root: Path, say: Callable[[str], None]) -> RunRecord:
    """Move ``rec`` to the first healthy host of its ``--failover`` list, say so, and return its record
    there (running again)."""
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.moving.move import move_run

    to_host, health = pick_host(rec.failover, rec.host)
    record = {"from": rec.host, "to": to_host, "why": why, "health": health, "time": time.time()}
    r = move_run(rec.run_id, to_host, host=rec.host, runs_root=runs_root, extra={"failover": record})
    src = r.from_host if r.source == "host" else f"the copy in {r.source}"
    say(
        f"pippa: failover: {rec.run_id} ({rec.session}) moved from {src} to {to_host} after {why} "
        f"({health}); resumed there"
    )
    return locate([r.run_id], to_host)[r.run_id]


def from_pulled_copy(name: str, runs_root: Path) -> RunRecord | None:
    """A ``--failover`` run whose host does not answer, as the laptop's pulled copy tells it
    (``runs/<host>/<run-id>/``, ``pippa pull --checkpoints``): ``pippa wait`` started after the host died
    counts the outage from its own start and moves the run from this copy. None: no such copy, or the
    run has no ``--failover`` hosts or no recipe."""
    import json

    from pippa_contract.runpick import designates

    found = sorted(
        {
            p.parent
            for p in runs_root.glob(f"*/*/{rd.RUN_JSON}")
            if p.parent.name == name or designates(name, p.parent.name)
        }
    )
    if len(found) != 1:
        return None
    try:
        meta = json.loads((found[0] / rd.RUN_JSON).read_text())
    except (OSError, ValueError):
        return None
    restart = meta.get("restart") if isinstance(meta, dict) else None
    hosts = restart.get("failover") if isinstance(restart, dict) else None
    if not isinstance(hosts, list) or not hosts or not meta.get("recipe"):
        return None
    return RunRecord(
        host=str(meta.get("host") or found[0].parent.name),
        run_id=found[0].name,
        session=str(meta.get("session") or ""),
        recipe=str(meta["recipe"]),
        command=str(meta.get("command") or ""),
        state=states.RUNNING,
        failover=tuple(str(h) for h in hosts),
    )
