"""``pippa recover HOST``: start again every lost run that has attempts left, each in its own session.

A run is lost when its tmux session ended with no exit code and nobody asked it to stop (a reboot,
``tmux kill-server``, the OOM killer taking the shell; ``runs.records.listing``). A supervised run (a restart
policy: ``--retry``, ``--stall-timeout``) records its attempts (``pippa_agent.supervise``); its supervisor,
started again in the same run directory, counts the lost attempt and continues with ``--resume``.
A run without a policy is left to ``pippa resume`` (the user decides), and so is a run over several
hosts (its ranks must meet again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pippa_contract import retry, states, verbs
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.schedulers import launch_request
from pippa_ops.runs.launching.script import Job, render_cmd_sh
from pippa_ops.runs.records.listing import RunRecord, list_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport

if TYPE_CHECKING:  # the verbs' message types, for annotations only
    from pippa_contract import messages


@dataclass(frozen=True)
class Recovered:
    run_id: str
    session: str
    attempt: int  # the attempt it starts now
    max_attempts: int
    checkpoint: str | None = None  # the newest checkpoint it continues from (None: from step 0)


@dataclass(frozen=True)
class RecoverResult:
    host: str
    resumed: tuple[Recovered, ...]
    skipped: tuple[tuple[str, str], ...]  # (run id, why not) for each lost run left alone


def why_not(run: RunRecord, live_sessions: set[str]) -> str | None:
    """Why the lost run ``run`` is not started again (None: it is); pure."""
    if run.hosts and len(run.hosts) > 1:
        return f"a run over several hosts: pippa resume {run.run_id} on each"
    if run.attempt is None or run.max_attempts is None:
        return f"no restart policy (--retry): pippa resume {run.run_id} continues it"
    left = retry.may_restart_lost(run.attempts_doc)
    if left is not None and not left:
        return f"no attempts left ({run.attempt}/{run.max_attempts}, infrastructure retries used)"
    if left is None and run.attempt >= run.max_attempts:
        return f"no attempts left ({run.attempt}/{run.max_attempts})"
    if run.session in live_sessions:
        return f"its session {run.session!r} is in use by another run"
    return None


def recover(spec: HostSpec, transport: Transport) -> RecoverResult:
    """Start the supervisor of each lost run with attempts left again, in its own session."""
    resumed: list[Recovered] = []
    skipped: list[tuple[str, str]] = []
    with agent_client.Session(transport) as agent:
        host_runs = list_runs(transport, spec.remote_dir, agent=agent)
        live = set(host_runs.sessions)
        for run in host_runs.runs:
            if run.state != states.LOST or run.job_id is not None:
                continue
            why = why_not(run, live)
            if why is not None:
                skipped.append((run.run_id, why))
                continue
            job = Job(run_id=run.run_id, recipe=run.recipe, command=run.command, argv=None)
            runs: list[messages.LaunchRun] = [
                {
                    "run_id": run.run_id,
                    "resume": True,
                    "cmd_sh": render_cmd_sh(job, spec.remote_dir, spec.env, supervised=True),
                }
            ]
            verbs.launch(agent, launch_request(spec.remote_dir, run.session, runs, stamp=time.time()))
            live.add(run.session)
            assert run.attempt is not None and run.max_attempts is not None
            n = run.attempt + 1  # a lost attempt may not count in --retry: the count grows with it
            found = verbs.run_checkpoints(agent, spec.remote_dir, run.run_id)[0] if run.recipe else []
            of = max(n, run.attempts_of or run.max_attempts)
            resumed.append(Recovered(run.run_id, run.session, n, of, found[-1] if found else None))
    return RecoverResult(spec.name, tuple(resumed), tuple(skipped))
