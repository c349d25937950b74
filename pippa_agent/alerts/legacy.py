"""Upgrading a host in place: an earlier `pippa up` copied a standalone alerts program to
``~/.config/pippa/alerts/hostalerts.py``, which runs still started by that version call at their end
and whose idle watcher may still run. ``alerts retire-legacy`` (run by the next `pippa up`) stops
that watcher and puts a forwarder in the program's place, so those calls reach this program and the
old program never runs beside it."""

from __future__ import annotations

import os

from pippa_agent.alerts.watch import watch_stop
from pippa_agent.host import write_atomic
from pippa_contract.hostdirs import ALERTS_PROGRAM, LEGACY_ALERTS_PROGRAM

FORWARDER = f'''"""pippa: the alerts are part of the host program now; this hands a call to it."""
import os
import sys

PROGRAM = os.path.expanduser({ALERTS_PROGRAM!r})
if os.path.isfile(PROGRAM):
    os.execv(sys.executable, [sys.executable, "-S", "-I", PROGRAM, "alerts", *sys.argv[1:]])
'''

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def retire() -> dict[str, Any]:
    """Replace an earlier version's program by the forwarder, stopping its watcher first."""
    path = os.path.expanduser(LEGACY_ALERTS_PROGRAM)
    try:
        with open(path) as f:
            current = f.read()
    except OSError:
        return {"retired": False}
    if current == FORWARDER:
        return {"retired": False}
    stopped = watch_stop()
    write_atomic(path, FORWARDER.encode(), 0o600)
    return {"retired": True, "stopped": stopped.get("stopped")}
