"""Signals that land at a known step: a test that stops a run at step N must not lose a race with it.

The test sees step N in metrics.jsonl, then freezes the process (SIGSTOP), queues the signal and lets
it go on (SIGCONT): the handler runs before the next step can finish, whatever the machine's speed or
load. (A run still needs steps left after N, which each caller leaves by a wide margin.)
"""

from __future__ import annotations

import os
import signal
import subprocess


def signal_frozen(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    """Deliver ``sig`` to ``proc`` while it is stopped, so it cannot run ahead between sight and signal."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        os.kill(proc.pid, sig)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
