"""A run's alarms told once (``alerts alarms --run-dir DIR [--detach]``): each alarm of its
``alarms.json`` (pippa_contract.alarms, written by the trainer) that ``alarms.sent`` does not list
yet is recorded there, then sent as an ``alarm`` event naming where it began and the samples to read.
The record comes first, under a lock: a second call, or two at once, never tells the same alarm
twice (an alarm whose delivery fails shows in deliveries.jsonl and ``pippa hosts``, as others do)."""

from __future__ import annotations

import os

from pippa_agent.alerts.deliver import emit
from pippa_agent.alerts.events import run_event
from pippa_contract import rundir as rd
from pippa_contract.alarms import read_alarms

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def unsent(run_dir: str) -> list[dict[str, Any]]:
    """The alarms not told yet, each now recorded in alarms.sent (one kind per line)."""
    import fcntl

    sent_path = os.path.join(run_dir, rd.ALARMS_SENT)
    fd = os.open(sent_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+", encoding="utf-8") as f:
            f.seek(0)
            told = {line.strip() for line in f}
            new = [a for a in read_alarms(os.path.join(run_dir, rd.ALARMS_JSON)) if a["kind"] not in told]
            f.write("".join(f"{a['kind']}\n" for a in new))
            f.flush()
            os.fsync(f.fileno())
        return new
    finally:
        os.close(fd)


def tell_alarms(run_dir: str) -> list[dict[str, Any]]:
    """Send each alarm not told yet; the delivery results."""
    run_dir = os.path.abspath(os.path.expanduser(run_dir))
    results = []
    for a in unsent(run_dir):
        why = f"{str(a['kind']).replace('_', ' ')} since step {a.get('since')}: {a.get('message')}"
        event = run_event(run_dir, "alarm", why)
        step = a.get("samples_step")
        where = f" --step {step}" if isinstance(step, int) else ""
        event["look"] = f"pippa samples {event['run_id']}{where} --host {event['host']}"
        results.append(emit(event))
    return results
