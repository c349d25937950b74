"""The run supervisor (``supervisor``), its file reading (``files``) and recovery at boot
(``recover``): host code, run by the host program (``pippa_agent.program``)."""

from __future__ import annotations

import os
import signal


def supervise(run_dir: str) -> int:
    """``supervise RUN_DIR``: run the run's attempts under its policy; the last attempt's exit code."""
    from pippa_agent.supervise.supervisor import Supervisor

    sup = Supervisor(os.path.abspath(run_dir))
    signal.signal(signal.SIGINT, sup.on_interrupt)
    signal.signal(signal.SIGTERM, sup.on_hangup)
    signal.signal(signal.SIGHUP, sup.on_hangup)
    try:
        return sup.run()
    finally:  # the space kept for the record goes back before cmd.sh writes exit_code
        sup.reserve.release()
