"""The supervisor's alerts between a run's start and its end (a retry, a lost session, a budget): told
through this same host program's ``alerts``, in the background. Standard library only (host code)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from pippa_agent.zipapp import program_file
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR


def alert(run_dir: str, state: str) -> None:
    """Tell PIPPA_NOTIFY (when ``pippa up`` set alerts up): the run's end is told by cmd.sh; these are
    the events in between. The reason is read from the run's files by the alerts program (redacted
    there), never argv."""
    program = program_file()
    alerts_on = os.path.isfile(os.path.join(os.path.expanduser(ALERTS_DIR), ALERTS_CONFIG))
    if program is None or not alerts_on:
        return
    argv = [sys.executable or "python3", "-S", "-I", program, "alerts", "event"]
    argv += ["--run-dir", run_dir, "--state", state, "--detach"]
    with contextlib.suppress(OSError):
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
