"""``pippa why RUN``: why each attempt of a run ended, what the retry did about it, and what to do next.

Diagnosis is data: the host supervisor writes each attempt's class (pippa_contract.failures), the lines
that decided it, its retry decision (pippa_contract.retry) and, for a stall, the forensics summary
(pippa_agent.forensics: the suspect and the stuck frames) into attempts.json; this module only reads
that record (``RunRecord.attempts_doc``) and renders it. A run without a supervisor record is classed
here from what its listing says (exit code, the error line, the metrics end line).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pippa_contract import failures as fc
from pippa_contract.advice import after_disk_full, after_failed_start
from pippa_contract.alerts import healthy_gpus
from pippa_ops.runs.records.listing import RunRecord


@dataclass(frozen=True)
class AttemptWhy:
    attempt: int
    cls: str  # a pippa_contract.failures class, or "running"
    reason: str | None
    exit_code: int | None
    lines: list[str] = field(default_factory=list)  # the log lines that decided the class
    action: str | None = None  # what the supervisor did next (retry, why not)
    suspect: str | None = None  # a stall's suspect (the rank not in the collective, or the shared frame)
    stuck: dict[str, list[str]] = field(default_factory=dict)  # "rank/pid" -> innermost frames first
    forensics: str | None = None  # the attempt's forensics directory, relative to the run directory
    gpu_index: int | None = None  # a gpu-fault: the faulted GPU's index (nvidia-smi's), when known
    resumed_from_step: int | None = None  # the checkpoint it resumed from
    skipped: list[str] = field(default_factory=list)  # torn checkpoints its resume passed over


@dataclass(frozen=True)
class Why:
    run_id: str
    host: str
    session: str
    label: str  # the recipe, or the command
    state: str
    attempts: list[AttemptWhy]
    next: str  # the suggested next command
    spend: dict[str, float] | None = None  # the goodput ledger (pippa_contract.ledger), money per part
    currency: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _attempt(raw: dict[str, Any]) -> AttemptWhy:
    decision = _dict(raw.get("decision"))
    forensics = _dict(raw.get("forensics"))
    suspect = _dict(forensics.get("suspect"))
    stacks = _dict(forensics.get("stacks"))
    cls = str(raw.get("class") or raw.get("outcome") or "")
    if not cls or cls == "failed":
        cls = fc.CRASH
    return AttemptWhy(
        attempt=int(raw.get("attempt") or 0),
        cls=cls,
        reason=raw.get("reason"),
        exit_code=raw.get("exit_code") if isinstance(raw.get("exit_code"), int) else None,
        lines=[str(x) for x in raw.get("lines") or [] if x],
        action=str(decision.get("why")) if decision.get("why") else None,
        suspect=str(suspect.get("text")) if suspect.get("text") else None,
        stuck={str(k): [str(f) for f in v] for k, v in stacks.items() if isinstance(v, list)},
        forensics=str(forensics.get("dir")) if forensics.get("dir") else None,
        gpu_index=raw["gpu_index"] if isinstance(raw.get("gpu_index"), int) else None,
        resumed_from_step=raw["resumed_from_step"] if isinstance(raw.get("resumed_from_step"), int) else None,
        skipped=[str(x) for x in raw.get("skipped_checkpoints") or [] if x],
    )


def _unsupervised(rec: RunRecord, log_tail: list[str] | None = None) -> AttemptWhy:
    """The one attempt of a run without attempts.json, classed from its listing, or from the tail of
    its output.log where the caller read it (a SLURM job's output: the rules of pippa_contract.failures)."""
    if rec.active:
        return AttemptWhy(1, "running", None, None)
    tail = log_tail if log_tail else [rec.error] if rec.error else []
    verdict = fc.classify(
        fc.AttemptFacts(
            exit_code=rec.exit_code,
            log_tail=tail,
            stopped=rec.state in ("stopped", "killed", "cancelled"),
            lost=rec.state == "lost",
            diverged_error=rec.error if rec.state == "diverged" else None,
        )
    )
    return AttemptWhy(1, verdict.cls, verdict.reason, rec.exit_code, list(verdict.lines))


def next_command(rec: RunRecord, last: AttemptWhy) -> str:
    """The command a person most likely wants after this run's last attempt."""
    where = f"{rec.run_id} --host {rec.host}"
    if rec.active:
        return f"pippa logs {where} -f"
    if last.cls == fc.COMPLETED:
        return f"pippa pull {where}"
    if last.cls == fc.LOST:
        return f"pippa recover {rec.host}"
    if last.cls == fc.GPU_FAULT:
        rest = healthy_gpus(rec.command, last.gpu_index)
        if rest is not None:
            return f"pippa resume {where} --gpus {rest}   (GPU {last.gpu_index} faulted; or --on OTHER_HOST)"
        return f"pippa resume {rec.run_id} --on OTHER_HOST   (a GPU fault: not on {rec.host})"
    if last.cls == fc.DISK_FULL:
        return after_disk_full(last.reason, rec.run_id, rec.host)
    if rec.failed_at_start and rec.recipe:  # a resume restarts from step 0 and meets the same cause
        return after_failed_start(last.reason or rec.error, rec.recipe, rec.command, rec.host)
    if last.cls == fc.CONFIG:
        return f"pippa logs {where}   (fix the recipe or setting, then pippa run again)"
    if rec.recipe and last.cls in (fc.CRASH, fc.OOM, fc.HOST_OOM, fc.STOPPED, fc.STALLED, fc.NCCL):
        return f"pippa resume {where}"
    return f"pippa logs {where}"


def explain(rec: RunRecord, log_tail: list[str] | None = None) -> Why:
    """The ``why`` of one run (pure); ``log_tail``: its output.log's last lines, for a run the host
    supervisor did not record (a SLURM job), from its last requeued attempt on."""
    doc = rec.attempts_doc if isinstance(rec.attempts_doc, dict) else None
    raw = doc.get("attempts") if doc else None
    attempts = [_attempt(a) for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
    if not attempts:
        attempts = [_unsupervised(rec, log_tail)]
    rows = [a for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
    spend = None
    if any(a.get("price_s") is not None for a in rows):  # the host had a price: the goodput ledger
        import time

        from pippa_contract.ledger import ledger

        spend = ledger(rows, (), rec.ended or time.time())
    return Why(
        rec.run_id,
        rec.host,
        rec.session,
        rec.label,
        rec.state_text,
        attempts,
        next_command(rec, attempts[-1]),
        spend,
        rec.currency,
    )


def render(why: Why, max_attempts: int | None = None) -> list[str]:
    """The screen of ``pippa why``."""
    out = [f"{why.run_id} ({why.session}, {why.label}) on {why.host}: {why.state}"]
    n = max(max_attempts or 0, len(why.attempts))  # a resumed run: more attempts than its budget
    for a in why.attempts:
        head = f"attempt {a.attempt}/{n}  {fc.label(a.cls, a.reason)}"
        out.append(head + (f" (exit {a.exit_code})" if a.exit_code not in (None, 0) else ""))
        for skipped in a.skipped:
            out.append(f"  resume: {skipped}")
        if a.skipped:
            at = a.resumed_from_step
            out.append(f"  resumed from step {at}" if at is not None else "  no whole checkpoint: step 0")
        if a.action:
            out.append(f"  then: {a.action}")
        for line in a.lines[:4]:
            out.append(f"  | {line}")
        if a.suspect:
            out.append(f"  suspect: {a.suspect}")
        for who, frames in sorted(a.stuck.items()):
            out.append(f"  stack of {'rank ' + who if not who.startswith('launcher') else who}:")
            out.extend(f"    {f}" for f in frames[:6])
        if a.forensics:
            out.append(f"  forensics: runs/{why.run_id}/{a.forensics}/ on {why.host}")
    if why.spend is not None:
        from pippa_contract.alerts import money

        parts = ", ".join(f"{k} {money(v, why.currency)}" for k, v in why.spend.items())
        out.append(f"spent: {money(sum(why.spend.values()), why.currency)} = {parts}")
    out.append(f"next: {why.next}")
    return out
