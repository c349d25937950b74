"""Recovery at boot (the ``@reboot`` line of ``pippa up``'s ``recover_on_boot``): start again every
supervised run of a project that a reboot left without an exit code, each in its own tmux session."""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from pippa_agent.host import ran_for
from pippa_agent.supervise.files import read_json, write_json
from pippa_contract import rundir as rd
from pippa_contract.attempts import policy_of, summarize
from pippa_contract.names import SESSION_RE
from pippa_contract.records import read_record
from pippa_contract.retry import may_restart_lost
from pippa_contract.sessions import IDENTITY_FORMAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def recover_lost(remote_dir: str) -> dict[str, Any]:
    """What ``recover_on_boot`` runs (cron @reboot): start again, each in its own tmux session, every
    supervised run of ``remote_dir`` that ended with no exit code, no stop and no live session, and
    has attempts left. Its cmd.sh runs this supervisor again, which counts the lost attempt."""
    out: dict[str, Any] = {"resumed": [], "skipped": []}
    base = os.path.join(os.path.expanduser(remote_dir), "runs")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        d = os.path.join(base, name)
        meta = read_json(os.path.join(d, rd.RUN_JSON))
        if not isinstance(meta, dict) or not isinstance(meta.get("restart"), dict):
            continue
        ended = any(
            os.path.exists(os.path.join(d, f)) for f in (rd.EXIT_CODE, rd.STOP_REQUESTED, rd.SLURM_JOB)
        )
        if ended or not os.path.exists(os.path.join(d, rd.STARTED)):
            continue
        session = str(meta.get("session") or "")
        if not SESSION_RE.match(session) or not os.path.exists(os.path.join(d, rd.CMD_SH)):
            continue
        if subprocess.run(["tmux", "has-session", "-t", "=" + session], capture_output=True).returncode == 0:
            continue  # running, or its session is taken: not lost
        summary = summarize(read_record(os.path.join(d, rd.ATTEMPTS_JSON)))
        if isinstance(meta.get("hosts"), list) and len(meta["hosts"]) > 1:
            out["skipped"].append([name, "a run over several hosts"])
            continue
        left = may_restart_lost(read_record(os.path.join(d, rd.ATTEMPTS_JSON)))  # a lost attempt is free
        if (
            summary is None
            or left is False
            or (left is None and summary["attempt"] >= policy_of(meta)["max_attempts"])
        ):
            out["skipped"].append([name, "no attempts left"])
            continue
        meta["past_s"] = float(meta.get("past_s") or 0.0) + ran_for(d)  # its duration counts every stretch
        for state in rd.RUN_STATE_FILES:
            if os.path.lexists(os.path.join(d, state)):
                os.unlink(os.path.join(d, state))
        meta["resumed"] = [*meta.get("resumed", []), time.time()]
        write_json(os.path.join(d, rd.RUN_JSON), meta)
        job = "trap : INT; sh " + shlex.quote(os.path.join(d, rd.CMD_SH))
        argv = [
            "tmux",
            "new-session",
            "-d",
            "-P",
            "-F",
            IDENTITY_FORMAT,
            "-s",
            session,
            "-x",
            "200",
            "-y",
            "50",
        ]
        p = subprocess.run([*argv, "sh", "-c", job], capture_output=True)
        if p.returncode != 0:
            out["skipped"].append([name, "tmux: " + p.stderr.decode(errors="replace").strip()])
            continue
        with open(os.path.join(d, rd.TMUX_SESSION), "w") as f:
            f.write(p.stdout.decode().strip() + "\n")
        out["resumed"].append([name, session])
    return out
