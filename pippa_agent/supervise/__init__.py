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
    signal.signal(signal.SIGUSR1, sup.on_save_signal)
    signal.signal(signal.SIGUSR2, sup.on_save_signal)
    try:
        return sup.run()
    finally:  # the space kept for the record goes back before cmd.sh writes exit_code
        sup.reserve.release()


def supervise_task(run_dir: str, recipe: str, command: str) -> int:
    """``task RUN_DIR RECIPE COMMAND``: the run of an exported task (SkyPilot, ``pippa export``), whose
    engine restarts it by exit status: record run.json when the directory has none (the command line and
    a policy that hands every infrastructure failure out: ``infra_retries`` 0, no ``--retry``), then
    supervise it. A restart finds the record and continues the attempts with ``--resume``, with this
    start's command line (a recovered multi-node task may meet at another address)."""
    import json
    import time

    from pippa_contract import rundir as rd

    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, rd.RUN_JSON)
    policy = {"max_attempts": 1, "infra_retries": 0}
    meta = {
        "run_id": os.path.basename(os.path.abspath(run_dir)),
        "session": "task",
        "host": "task",
        "recipe": recipe,
        "started": time.time(),
        "restart": policy,
    }
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        pass
    meta["command"] = command
    with open(path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(path + ".tmp", path)
    return supervise(run_dir)
