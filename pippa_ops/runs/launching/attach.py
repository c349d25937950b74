"""Which tmux session ``pippa attach NAME`` opens on a host, from one agent request (the host's runs
and its live sessions): NAME itself when it is a live session, else the session of the run NAME
means, while that run is active. A SLURM host has batch jobs, no terminal: one line says what to do."""

from __future__ import annotations

from pippa_contract.names import SESSION_RE
from pippa_ops.errors import NotAttachable, SessionNotFound
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.schedulers import scheduler_for
from pippa_ops.runs.records.listing import current_run, list_runs
from pippa_ops.transport.base import Transport


def attach_session(transport: Transport, spec: HostSpec, name: str) -> str:
    listed = list_runs(transport, spec.remote_dir)
    if not scheduler_for(spec).has_terminal:
        run = current_run(listed, name)
        raise NotAttachable(
            f"{spec.name}: run {run.run_id} is SLURM batch job {run.job_id} "
            f"({run.slurm_state or run.state}): a batch job has no terminal to attach to; "
            f"`pippa logs {run.run_id} --host {spec.name} -f` "
            f"follows its output, `srun --jobid {run.job_id} --overlap --pty bash` on the login node "
            "opens a shell on its first node"
        )
    if SESSION_RE.fullmatch(name) and name in listed.sessions:
        return name
    run = current_run(listed, name)
    if not run.active:
        raise SessionNotFound(f"{spec.name}: run {name} has ended (its session is gone); see `pippa logs`")
    return run.session
