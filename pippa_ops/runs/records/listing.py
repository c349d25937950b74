"""Run records on a host: every run directory read in ONE round trip (the host agent), states derived.

A run's state comes from its files (docs/CONTRACTS.md) plus the host's tmux sessions, never from
memory on the laptop, so ``ps``, ``logs`` and the dashboard agree and a finished run stays
inspectable after its session is gone. Times are the host's clock (file mtimes and the
agent's ``time.time()`` in the same answer), so a skewed laptop clock does not make durations lie.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pippa_contract import attempts as attempts_json
from pippa_contract import failures as fc
from pippa_contract import runpick, states, verbs
from pippa_contract.advice import started_training
from pippa_contract.states import ACTIVE
from pippa_contract.states import derive_state as derive_state  # the states, as tests and callers read them
from pippa_contract.states import slurm_state as slurm_state
from pippa_contract.wire import READ_RUN
from pippa_ops.errors import AmbiguousSession, RunNotFound
from pippa_ops.runs.records.tmux import parse_sessions
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport, read_to_end

DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class RunRecord:
    """One run as ``ps`` shows it."""

    host: str
    run_id: str
    session: str
    recipe: str | None
    command: str
    state: str  # running | queued | finished | failed | diverged | stopped | killed | cancelled | lost
    exit_code: int | None = None
    started: float | None = None  # host unix time the job began (launch time while queued)
    ended: float | None = None
    duration_s: float | None = None
    stop_requested: float | None = None
    last_step: int | None = None
    last_reward: float | None = None
    commit: str | None = None
    dirty: bool | None = None
    sweep_index: int | None = None
    sweep_size: int | None = None
    error: str | None = None  # why it failed: its metrics' end error, else the last error line of its log
    hosts: tuple[str, ...] | None = None  # a run over several hosts: all of them, machine rank 0 first
    machine_rank: int | None = None  # this host's rank in such a run
    job_id: str | None = None  # the SLURM job of a run on a SLURM host (None: a tmux run)
    slurm_state: str | None = None  # squeue/scontrol's state and reason, e.g. "PENDING (Resources)"
    cost: float | None = None  # so far, at the host's rate (pippa_ops.runs.records.cost); None: no rate
    currency: str | None = None  # the rate's currency (HostSpec.currency) where there is a cost
    attempt: int | None = None  # a supervised run (--retry, --stall-timeout): its attempt now (1-based)
    max_attempts: int | None = None
    attempts_of: int | None = None  # the m of "attempt n/m" as the host's log says it (free retries too)
    retry_in_s: float | None = None  # waiting before the next attempt: seconds left
    attempts_doc: dict[str, Any] | None = None  # attempts.json as the supervisor wrote it (pippa why)
    moved_to: str | None = None  # the host it moved to (pippa resume --on): it goes on there
    moved_from: str | None = None  # the host it moved from (run.json's moved_from): a copy there is stale
    stale_of: str | None = None  # still going here though it moved to this host: a stale copy (moving.stale)
    failover: tuple[str, ...] = ()  # --failover's hosts (run.json's restart.failover; moving.failover)
    failure: str | None = None  # its last attempt's failure class and reason, as ps says it (below)
    recording: bool = False  # going on, and this stretch's trainer wrote a line (LastRecords.begun_since)
    last_line: str | None = None  # going on with no metrics yet: its output's last line (start-up)
    warning: str | None = None  # the alarms the trainer raised (pippa_contract.alarms.warning)
    samples_step: int | None = None  # the sampled step to read for the first alarm
    failed_at_start: bool = False  # a recipe run that failed before its first step (contract.advice)
    first_started: float | None = None  # a resumed run: when its first stretch began (ps's STARTED)
    skipped: tuple[str, ...] = ()  # torn checkpoints its last attempt's resume passed over (checkpoint_check)

    @property
    def label(self) -> str:
        return self.recipe or self.command

    @property
    def began(self) -> float | None:
        """When the run began: its first stretch's start (a resumed run's ``started`` is its last)."""
        return self.first_started if self.first_started is not None else self.started

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def state_text(self) -> str:
        if self.stale_of and self.active:
            return f"stale copy (moved to {self.stale_of})"
        if self.state == states.MOVED and self.moved_to:
            return f"moved to {self.moved_to}"
        if self.failure and not self.active:  # stalled (no new metrics line for 15m), oom (...), lost, ...
            many = self.attempt is not None and self.attempt > 1
            return self.failure + (f" after {self.attempt} attempts" if many else "")
        if self.state == states.RUNNING and self.retry_in_s is not None and self.attempt is not None:
            of = max(self.attempt + 1, self.attempts_of or 0)  # an infrastructure retry's backoff too
            return f"running (attempt {self.attempt + 1}/{of} in {self.retry_in_s:.0f}s)"
        if self.attempt is not None and self.max_attempts is not None and self.max_attempts > 1:
            if self.state == states.RUNNING:
                return f"running (attempt {self.attempt}/{self.max_attempts})"
            ended_badly = self.state in (states.FAILED, states.DIVERGED)
            if ended_badly and self.attempt > 1 and self.exit_code is not None:
                return f"{self.state} after {self.attempt} attempts (exit {self.exit_code})"
        if self.state == states.DIVERGED:
            return self.state
        if self.state in (states.FINISHED, states.FAILED, states.STOPPED) and self.exit_code is not None:
            return f"{self.state} (exit {self.exit_code})"
        if self.slurm_state and self.exit_code is None:
            return f"{self.state} ({self.slurm_state})"  # e.g. "queued (PENDING (Resources))"
        return self.state

    @property
    def spend(self) -> dict[str, float] | None:
        """Its goodput ledger (money per part, pippa_contract.ledger) where its attempts have a price."""
        doc = self.attempts_doc if isinstance(self.attempts_doc, dict) else {}
        rows = [a for a in doc.get("attempts") or [] if isinstance(a, dict)]
        if not any(a.get("price_s") is not None for a in rows):
            return None
        import time

        from pippa_contract.ledger import ledger

        return ledger(rows, (), self.ended or time.time())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label, "state_text": self.state_text, "ledger": self.spend}


@dataclass(frozen=True)
class HostRuns:
    host: str
    now: float  # host clock
    sessions: dict[str, float] = field(default_factory=dict)  # live tmux session -> created
    identities: dict[str, str] = field(default_factory=dict)  # live tmux session -> "$id@created"
    runs: tuple[RunRecord, ...] = ()


_num = runpick.num  # a number from a file's text ("1712345678\n"), or None


def _last_step(steps: list[Any]) -> tuple[int | None, float | None]:
    for rec in reversed(steps):
        if isinstance(rec, dict) and rec.get("type") == "step":
            step = rec.get("step")
            reward = rec.get("reward/mean", rec.get("reward"))
            return (
                int(step) if isinstance(step, int | float) else None,
                float(reward) if isinstance(reward, int | float) else None,
            )
    return None, None


def _record(
    host: str, raw: dict[str, Any], now: float, sessions: dict[str, float], idents: dict[str, str]
) -> RunRecord | None:
    """One run from the agent's facts about its directory (pippa_contract.runfacts)."""
    picked = runpick.fact(raw, sessions, idents)
    if picked is None:
        return None
    run_id, meta, session, state = picked.run_id, raw["meta"], picked.session, picked.state
    ctime = _num(raw.get("ctime"))
    exit_text = str(raw.get("exit_code") or "")
    exit_code = int(exit_text) if exit_text.lstrip("-").isdigit() else None
    ended = _num(raw.get("ended")) if exit_code is not None else None
    started_host = _num(raw.get("started"))
    end = raw.get("end")
    attempts = attempts_json.summarize(raw.get("attempts"))
    job = raw.get("slurm") if isinstance(raw.get("slurm"), dict) else None
    job_state = None
    if job is not None:
        sstate = str(job.get("state") or "")
        reason = str(job.get("reason") or "")
        job_state = f"{sstate} ({reason})" if reason and reason != "None" else sstate or None
    if ended is None and state in (states.KILLED, states.LOST):
        ended = _num(raw.get("log_time"))
    duration = None
    if started_host is not None:  # this stretch, and the stretches before its resumes (run.json past_s)
        past = _num(meta.get("past_s")) or 0.0
        duration = past + max(0.0, (ended if ended is not None else now) - started_host)
    steps = raw.get("steps")
    step, reward = _last_step(steps if isinstance(steps, list) else [])
    error = None
    if exit_code not in (None, 0):
        from_metrics = end.get("error") if isinstance(end, dict) else None
        from_attempt = attempts["reason"] if attempts and attempts["attempt"] > 1 else None
        error = str(from_attempt or from_metrics or raw.get("error") or "") or None
    elif state == states.FAILED and job_state:
        error = f"SLURM job {job_state}"  # the job ended before its script could record why
    raw_sync = meta.get("sync")
    sync: dict[str, Any] = raw_sync if isinstance(raw_sync, dict) else {}
    return RunRecord(
        host=host,
        run_id=run_id,
        session=session,
        recipe=meta.get("recipe"),
        command=str(meta.get("command", "")),
        state=state,
        exit_code=exit_code,
        started=started_host if started_host is not None else ctime,
        ended=ended,
        duration_s=duration,
        stop_requested=_num(raw.get("stop_requested")),
        last_step=step,
        last_reward=reward,
        commit=sync.get("commit"),
        dirty=sync.get("dirty"),
        sweep_index=meta.get("sweep_index"),
        sweep_size=meta.get("sweep_size"),
        error=error,
        hosts=tuple(str(h) for h in meta["hosts"]) if isinstance(meta.get("hosts"), list) else None,
        machine_rank=meta.get("machine_rank") if isinstance(meta.get("machine_rank"), int) else None,
        job_id=str(job["job_id"]) if job is not None else None,
        slurm_state=job_state,
        attempt=attempts["attempt"] if attempts else None,
        max_attempts=attempts["max_attempts"] if attempts else None,
        attempts_of=attempts["of"] if attempts else None,
        retry_in_s=_retry_in(attempts, now) if attempts and state == states.RUNNING else None,
        attempts_doc=raw["attempts"] if isinstance(raw.get("attempts"), dict) else None,
        moved_to=str(raw["moved_to"]) if raw.get("moved_to") else None,
        moved_from=_moved_from(meta.get("moved_from")),
        failover=_failover(meta.get("restart")),
        failure=_failure(raw.get("attempts")),
        recording=raw.get("recording") is True,
        first_started=_num(meta.get("first_started")),
        failed_at_start=bool(meta.get("recipe"))
        and exit_code not in (None, 0)
        and state != states.STOPPED
        and not started_training(end, steps),
        skipped=_skipped(raw.get("attempts")),
        last_line=str(raw["last_line"]) if raw.get("last_line") else None,
        **_alarm_fields(raw.get("alarms")),
    )


def _failure(doc: object) -> str | None:
    """``stalled (no new metrics line for 15m)``: the last attempt's class where it says more than the
    state does (a crash, a stop, a divergence and a success are the state's own words)."""
    attempts = doc.get("attempts") if isinstance(doc, dict) else None
    last = attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else {}
    cls = last.get("class")
    if not isinstance(cls, str) or cls in (fc.COMPLETED, fc.CRASH, fc.STOPPED, fc.DIVERGED, fc.LOST):
        return None
    reason = last.get("reason")
    return fc.label(cls, str(reason) if reason else None)


def _skipped(doc: object) -> tuple[str, ...]:
    """``checkpoint-7 skipped: model.safetensors is 1024 bytes, the manifest says 2048``, for each torn
    checkpoint the last attempt's resume passed over (the supervisor's record)."""
    attempts = doc.get("attempts") if isinstance(doc, dict) else None
    last = attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else {}
    found = last.get("skipped_checkpoints")
    return tuple(str(x) for x in found) if isinstance(found, list) else ()


def _alarm_fields(alarms: Any) -> dict[str, Any]:
    """``warning`` and ``samples_step`` of a run's alarms (runfacts' ``alarms``), if it has any."""
    from pippa_contract.alarms import warning

    listed = [a for a in alarms if isinstance(a, dict)] if isinstance(alarms, list) else []
    if not listed:
        return {}
    step = listed[0].get("samples_step")
    return {"warning": warning(listed), "samples_step": step if isinstance(step, int) else None}


def _retry_in(attempts: dict[str, Any], now: float) -> float | None:
    """Seconds until the supervisor's next attempt, while it waits (its backoff)."""
    at = _num(attempts.get("next_at"))
    return max(0.0, at - now) if at is not None else None


def host_runs(host: str, answer: Mapping[str, Any]) -> HostRuns:
    """The agent's ``list_runs`` answer as records with their states (pure; unit-tested)."""
    now = _num(answer.get("now")) or 0.0
    sessions: dict[str, float] = {}
    idents: dict[str, str] = {}
    for info in parse_sessions(str(answer.get("sessions") or "")):
        sessions[info.name] = info.created
        idents[info.name] = info.identity
    runs = []
    for raw in answer.get("runs") or []:
        rec = _record(host, raw, now, sessions, idents) if isinstance(raw, dict) else None
        if rec is not None:
            runs.append(rec)
    runs.sort(key=lambda r: (r.started or 0.0, r.run_id))
    return HostRuns(host=host, now=now, sessions=sessions, identities=idents, runs=tuple(runs))


def list_runs(
    transport: Transport,
    remote_dir: str,
    limit: int = DEFAULT_LIMIT,
    *,
    agent: agent_client.Session | None = None,
) -> HostRuns:
    """Every run record on the host (the last ``limit`` run dirs), in one round trip (in ``agent``'s
    process when the caller has one going)."""
    answer = verbs.list_runs(agent or agent_client.Once(transport), remote_dir, limit)
    return host_runs(transport.name, answer)


def read_run(
    transport: Transport,
    remote_dir: str,
    name: str | None,
    limit: int = DEFAULT_LIMIT,
    *,
    redact: bool = False,
) -> tuple[HostRuns, str | None, bytes]:
    """In ONE request: the host's runs (as ``list_runs``), the run id ``name`` means there as the
    agent chose it (``pippa_contract.runpick``; no name: the newest run; None: none), and that run's
    output.log (``b""`` when there is none)."""
    with verbs.read_run(agent_client.Once(transport), remote_dir, name, limit, redact) as proc:
        proc.close_stdin()
        line = proc.readline()
        if not line.endswith(b"\n"):  # ended without its answer: why (then "gave no answer")
            agent_client.check_stream(transport, READ_RUN, proc, proc.wait(60))
        answer = agent_client.parse_answer(transport, READ_RUN, line)
        chosen = answer.pop("chosen", None)
        out = read_to_end(proc)
        agent_client.check_stream(transport, READ_RUN, proc, proc.wait(60))
    return host_runs(transport.name, answer), chosen if isinstance(chosen, str) else None, out


def select_runs(host_runs: HostRuns, name: str) -> list[RunRecord]:
    """Runs that ``name`` designates on this host: a run id, a session's runs (newest last), or a
    short run id (``runs.records.shortid``: a unique prefix or tail); a short id that fits several is refused
    (the rule: ``pippa_contract.runpick``, which the agent follows too)."""
    selected, several = runpick.select(host_runs.runs, name)
    if several:
        ids = ", ".join(several)
        raise AmbiguousSession(f"{host_runs.host}: {name!r} fits several runs ({ids}); give more of the id")
    return selected


def current_run(host_runs: HostRuns, name: str) -> RunRecord:
    """The run ``name`` means: that run id, or the session's running run, else its latest."""
    run = runpick.current(select_runs(host_runs, name))
    if run is None:
        raise RunNotFound(f"{host_runs.host}: no run or session named {name!r} (see `pippa ps`)")
    return run


def merge_group(records: list[RunRecord]) -> RunRecord:
    """The hosts' records of one multi-host run as one record: machine rank 0's steps and times, the
    state the ranks add up to, the hosts joined with "+" (``ps``, the dashboard)."""
    records = sorted(records, key=lambda r: r.machine_rank if r.machine_rank is not None else 0)
    head = records[0]
    state = min((r.state for r in records), key=states.ALL.index)  # worst first
    bad = next((r for r in records if r.state == state and r.state != states.FINISHED), head)
    return replace(
        head,
        host="+".join(r.host for r in records),
        state=state,
        exit_code=bad.exit_code,
        error=bad.error if bad is not head else head.error or bad.error,
        ended=max((r.ended or 0.0 for r in records), default=None) or None,
    )


def merge_groups(results: dict[str, HostRuns]) -> list[RunRecord]:
    """Every run of these hosts in host order, a multi-host run once (merged, where its first host's
    copy was) when all its hosts answered."""
    out: list[RunRecord | str] = []
    groups: dict[str, list[RunRecord]] = {}
    for host_runs in results.values():
        for r in host_runs.runs:
            if r.hosts and len(r.hosts) > 1 and set(r.hosts) <= set(results):
                if r.run_id not in groups:
                    out.append(r.run_id)
                groups.setdefault(r.run_id, []).append(r)
            else:
                out.append(r)
    return [merge_group(groups[x]) if isinstance(x, str) else x for x in out]


def _moved_from(moved: object) -> str | None:
    host = moved.get("host") if isinstance(moved, dict) else None
    return str(host) if host else None


def _failover(restart: object) -> tuple[str, ...]:
    hosts = restart.get("failover") if isinstance(restart, dict) else None
    return tuple(str(h) for h in hosts) if isinstance(hosts, list) else ()
