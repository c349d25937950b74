"""How a host runs jobs, chosen once from its entry (``scheduler_for``): in a named tmux session (the
default) or as one SLURM batch job per run from a login node. ``runs.launching.launch`` orders the steps of
launch, resume and stop and leaves what differs to the scheduler; no other core module asks which
one a host has. The agent's launch request is built in one place (``launch_request``).
It imports no typer/rich/textual: the dashboard reuses it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pippa_contract import rundir as rd
from pippa_contract import verbs
from pippa_ops.errors import BadSetting, SessionExists
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.hosts.scheduler import SlurmSpec
from pippa_ops.repo import repo_root
from pippa_ops.runs.launching.precheck import check_python
from pippa_ops.runs.launching.recipes import recipes_dir
from pippa_ops.runs.launching.restart import RestartFlags
from pippa_ops.runs.launching.script import Job, render_cmd_sh, run_json, session_argv
from pippa_ops.runs.launching.slurm import render_sbatch
from pippa_ops.runs.records.listing import HostRuns, RunRecord
from pippa_ops.runs.records.tmux import new_session_argv
from pippa_ops.sync import sync as sync_repo
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import validate_session

if TYPE_CHECKING:  # the verbs' message types, for annotations only
    from pippa_contract import messages

SyncInfo = dict[str, object]


@dataclass(frozen=True)
class LaunchResult:
    host: str
    session: str
    run_ids: tuple[str, ...]
    sync: SyncInfo | None
    job_ids: tuple[str, ...] = ()  # SLURM jobs, one per run, on a SLURM host

    def attach_hint(self) -> str:
        if self.job_ids:
            return f"none for a batch job (pippa attach {self.run_ids[0]} --host {self.host} says why)"
        return f"pippa attach {self.session} --host {self.host}"

    def logs_hint(self) -> str:
        return f"pippa logs {self.run_ids[0]} --host {self.host} -f"


@dataclass(frozen=True)
class Submission:
    """A planned launch on one host, whatever its scheduler."""

    spec: HostSpec
    transport: Transport
    agent: agent_client.Session
    jobs: list[Job]
    session: str
    replace: bool
    gap_s: float
    sync: bool
    now: float
    restart: RestartFlags | None
    nodes: int | None


def local_python(root: Path) -> str:
    """The host ``local`` runs training with the repo's .venv python, else this interpreter."""
    venv = root / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    import sys

    return sys.executable


def host_python(spec: HostSpec) -> str | None:
    """The host's python setting; for ``local`` without one, the repo's venv (else this interpreter)."""
    if spec.is_local and spec.python is None:
        return local_python(Path(spec.remote_dir))
    return spec.python


def sync_for_launch(
    spec: HostSpec, transport: Transport, marker: list[dict[str, object]], agent: agent_client.Session
) -> SyncInfo:
    """Sync the repo (for ``local`` it only writes the marker); commit + dirty. A no-change sync
    leaves its marker in ``marker``: the launch request writes it (one round trip fewer), and its
    agent process is the one that then launches (one Python start-up on the host, not two)."""
    result = sync_repo(spec, transport, repo_root(), defer_marker=marker, agent=agent)
    return {"commit": result.commit, "dirty": result.dirty}


def launch_request(
    remote_dir: str,
    session: str,
    runs: list[messages.LaunchRun],
    *,
    stamp: float,
    gap_s: float = 0,
    replace: bool = False,
    marker: list[dict[str, object]] | None = None,
) -> messages.LaunchRequest:
    """The agent's ``launch`` request: write each run's files, start tmux ``session`` running them in turn."""
    argv = new_session_argv(session, session_argv(remote_dir, [r["run_id"] for r in runs], gap_s))
    return {
        "remote_dir": remote_dir,
        "session": session,
        "runs": runs,
        "tmux_argv": argv,
        "replace": replace,
        "stamp": stamp,
        "sync_marker": marker[0] if marker else None,
        "program": agent_client.digest(),  # the host program its runs start with (RUN_DIR/agent.pyz)
    }


def start_session(agent: agent_client.Session, request: messages.LaunchRequest, host: str, hint: str) -> None:
    """Send a launch request; a session of that name already running is refused with ``hint``."""
    try:
        verbs.launch(agent, request)
    except SessionExists as e:
        raise SessionExists(f"{host}: tmux session {request['session']!r} {hint}") from e


class Scheduler(Protocol):
    name: str
    artifact: str  # the file a run directory gets: cmd.sh or job.sbatch
    has_terminal: bool  # a run has a terminal to attach to (a tmux session; a batch job has none)
    starts_at_once: bool  # a started run begins now (tmux), so ``pippa run`` can watch its start-up;
    # a batch job may wait in the queue

    def submit(self, s: Submission) -> LaunchResult:
        """Start the planned jobs."""
        ...

    def scripts(
        self, spec: HostSpec, jobs: list[Job], restart: RestartFlags | None, nodes: int | None
    ) -> list[str]:
        """The file each job's run directory gets (``artifact``), as ``submit`` writes it (``--dry-run``)."""
        ...

    def checks(self, spec: HostSpec, recipe: bool) -> list[str]:
        """What ``submit`` checks on the host before it starts anything, one line each (``--dry-run``)."""
        ...

    def resume(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, job: Job, session: str | None
    ) -> LaunchResult:
        """Start ``job`` (the run's command with ``--resume``) in the run's own directory."""
        ...

    def stop(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, runs: HostRuns, grace_s: float
    ) -> bool:
        """Interrupt the run (it saves), end it after ``grace_s``; whether it had to be killed."""
        ...

    def follow_session(self, session: str) -> str | None:
        """The tmux session whose end also ends a follow to the run's end (besides its exit_code)."""
        ...


class TmuxScheduler:
    """Runs in a named tmux session; a sweep's runs one after another in it."""

    name = "tmux"
    artifact = rd.CMD_SH
    has_terminal = True
    starts_at_once = True

    def scripts(
        self, spec: HostSpec, jobs: list[Job], restart: RestartFlags | None, nodes: int | None
    ) -> list[str]:
        if nodes is not None:
            raise BadSetting(f"--nodes needs a SLURM host; {spec.name} runs jobs in tmux")
        policies = [(restart or RestartFlags()).policy_for(job.recipe, recipes_dir()) for job in jobs]
        return [
            render_cmd_sh(job, spec.remote_dir, spec.env, supervised=policy.active)
            for job, policy in zip(jobs, policies, strict=True)
        ]

    def checks(self, spec: HostSpec, recipe: bool) -> list[str]:
        return [
            *_connect_checks(spec),
            "the host's last `pippa doctor` verdict is not fail (--force starts anyway)",
            "GPUs another process uses are named (a warning, nothing refused)",
            f"the repo is synced to {spec.remote_dir} (changed files only)",
            *(["the host's python can run the trainer (`pippa up` installs it)"] if recipe else []),
            "no tmux session of that name is running (--replace replaces it)",
        ]

    def submit(self, s: Submission) -> LaunchResult:
        spec, restart = s.spec, s.restart or RestartFlags()
        scripts = self.scripts(spec, s.jobs, s.restart, s.nodes)  # settings checked before a sync
        policies = [restart.policy_for(job.recipe, recipes_dir()) for job in s.jobs]
        if restart.budget is not None and spec.cost_per_hour is None and spec.cost_per_gpu_hour is None:
            raise BadSetting(
                f"--budget needs {spec.name}'s price: set cost_per_hour (or cost_per_gpu_hour) "
                "in its host entry, then pippa up"
            )
        marker: list[dict[str, object]] = []  # a no-change sync's marker: written by the launch request
        sync_info = sync_for_launch(spec, s.transport, marker, s.agent) if s.sync else None
        if any(job.recipe for job in s.jobs):  # nothing starts with a python that cannot run the trainer
            check_python(spec, host_python(spec), s.agent)
        runs: list[messages.LaunchRun] = [
            {
                "run_id": job.run_id,
                "run_json": run_json(
                    job,
                    session=s.session,
                    host=spec.name,
                    started=s.now,
                    sync=sync_info,
                    sweep_index=i,
                    sweep_size=len(s.jobs),
                    restart=policy.to_json() if policy.active else None,
                ),
                "cmd_sh": script,
            }
            for i, (job, policy, script) in enumerate(zip(s.jobs, policies, scripts, strict=True))
        ]
        request = launch_request(
            spec.remote_dir, s.session, runs, stamp=s.now, gap_s=s.gap_s, replace=s.replace, marker=marker
        )
        start_session(s.agent, request, spec.name, "is running; stop it, pick another --name, or --replace")
        return LaunchResult(spec.name, s.session, tuple(j.run_id for j in s.jobs), sync_info)

    def resume(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, job: Job, session: str | None
    ) -> LaunchResult:
        session = validate_session(session or run.session)
        # A supervised run (--retry) continues under its supervisor: one more recorded attempt, with --resume.
        supervised = run.max_attempts is not None
        cmd_sh = render_cmd_sh(job, spec.remote_dir, spec.env, supervised=supervised)
        runs: list[messages.LaunchRun] = [{"run_id": run.run_id, "resume": True, "cmd_sh": cmd_sh}]
        request = launch_request(spec.remote_dir, session, runs, stamp=time.time())
        start_session(agent, request, spec.name, "is in use; resume into another with --name")
        return LaunchResult(spec.name, session, (run.run_id,), None)

    def stop(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, runs: HostRuns, grace_s: float
    ) -> bool:
        session_runs = [r.run_id for r in runs.runs if r.session == run.session and r.active]
        stamp = time.time()
        answer = verbs.stop(agent, spec.remote_dir, run.session, session_runs, run.run_id, grace_s, stamp)
        return bool(answer.get("killed_session"))

    def follow_session(self, session: str) -> str | None:
        return session


def slurm_retries(host: str, restart: RestartFlags | None, has_cmd: bool) -> int:
    """``--retry N`` on a SLURM host: the job requeues itself up to N times, resuming (runs.launching.slurm);
    the other restart flags need the tmux supervisor and are refused in one line."""
    if restart is None or not restart.given:
        return 0
    flags = {
        "--stall-timeout": restart.stall_timeout,
        "--retry-diverged": restart.retry_diverged,
        "--backoff": restart.backoff,
        "--infra-retries": restart.infra_retries,
        "--on-oom": restart.on_oom,
        "--failover": restart.failover,
        "--budget": restart.budget,
    }
    others = [flag for flag, value in flags.items() if value]
    if others:
        raise BadSetting(
            f"{host} is a SLURM host: {others[0]} needs the tmux session's supervisor; "
            "a batch job takes --retry only (a requeue with --resume)"
        )
    if has_cmd:
        raise BadSetting(
            f"{host} is a SLURM host: --retry requeues a recipe job with --resume; "
            "a --cmd job has no checkpoint to resume from"
        )
    return max(0, restart.retry or 0)


class SlurmScheduler:
    """One sbatch job per run (a sweep's runs queue on the cluster side by side, not one after another)."""

    name = "slurm"
    artifact = rd.JOB_SBATCH
    has_terminal = False
    starts_at_once = False

    def scripts(
        self, spec: HostSpec, jobs: list[Job], restart: RestartFlags | None, nodes: int | None
    ) -> list[str]:
        retries = slurm_retries(spec.name, restart, any(job.recipe is None for job in jobs))
        slurm = spec.slurm or SlurmSpec()
        if nodes is not None:
            slurm = dataclasses.replace(slurm, nodes=nodes)
        return [
            render_sbatch(
                slurm,
                job.run_id,
                spec.remote_dir,
                job.command,
                spec.env,
                rendezvous=bool(job.recipe),
                retries=retries,
            )
            for job in jobs
        ]

    def checks(self, spec: HostSpec, recipe: bool) -> list[str]:
        return [
            *_connect_checks(spec),
            "the host's last `pippa doctor` verdict is not fail (--force starts anyway)",
            f"the repo is synced to {spec.remote_dir} (changed files only; the cluster's shared file system)",
            "sbatch is installed on the login node; sbatch accepts the job (its own checks: partition, "
            "account, time limit)",
        ]

    def submit(self, s: Submission) -> LaunchResult:
        spec = s.spec
        scripts = self.scripts(spec, s.jobs, s.restart, s.nodes)
        marker: list[dict[str, object]] = []
        sync_info = sync_for_launch(spec, s.transport, marker, s.agent) if s.sync else None
        job_ids = []
        for i, job in enumerate(s.jobs):
            meta = run_json(
                job,
                session="slurm",
                host=spec.name,
                started=s.now,
                sync=sync_info,
                sweep_index=i,
                sweep_size=len(s.jobs),
            )
            request: messages.SlurmSubmitRequest = {
                "remote_dir": spec.remote_dir,
                "run_id": job.run_id,
                "run_json": meta,
                "script": scripts[i],
                "sync_marker": marker[0] if marker and i == 0 else None,
            }
            job_ids.append(str(verbs.slurm_submit(s.agent, request)["job_id"]))
        return LaunchResult(spec.name, "slurm", tuple(j.run_id for j in s.jobs), sync_info, tuple(job_ids))

    def resume(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, job: Job, session: str | None
    ) -> LaunchResult:
        script = render_sbatch(spec.slurm or SlurmSpec(), run.run_id, spec.remote_dir, job.command, spec.env)
        request: messages.SlurmSubmitRequest = {
            "remote_dir": spec.remote_dir,
            "run_id": run.run_id,
            "resume": True,
            "stamp": time.time(),
            "script": script,
        }
        answer = verbs.slurm_submit(agent, request)
        return LaunchResult(spec.name, "slurm", (run.run_id,), None, (str(answer["job_id"]),))

    def stop(
        self, spec: HostSpec, agent: agent_client.Session, run: RunRecord, runs: HostRuns, grace_s: float
    ) -> bool:
        """SIGINT to the job's processes (the trainer saves), then scancel."""
        assert run.job_id is not None
        cancel = verbs.slurm_stop(agent, spec.remote_dir, run.run_id, run.job_id, grace_s, time.time())
        return bool(cancel.get("cancelled"))

    def follow_session(self, session: str) -> str | None:
        return None  # a batch job has no session: its exit_code ends the follow


def _connect_checks(spec: HostSpec) -> list[str]:
    if spec.is_local:
        return ["none to connect: the host `local` is this machine"]
    return [f"{spec.name} answers over SSH and its host key is the one known_hosts holds"]


TMUX: Scheduler = TmuxScheduler()
SLURM: Scheduler = SlurmScheduler()


def scheduler_for(spec: HostSpec) -> Scheduler:
    """The host entry's scheduler (``scheduler = "slurm"``, else tmux)."""
    return SLURM if spec.scheduler == "slurm" else TMUX


def scheduler_of(run: RunRecord) -> Scheduler:
    """The scheduler that started a run: a SLURM run has a job id."""
    return SLURM if run.job_id is not None else TMUX
