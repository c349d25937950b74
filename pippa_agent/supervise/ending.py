"""How the supervisor watches an attempt for a hang and decides what its end means (issue 34):

- ``StallWatch``: the attempt's stall threshold, from the policy (a fixed ``--stall-timeout``, ``off``)
  or derived from the run's own step times (pippa_contract.stall), read again every few seconds;
- ``capture``: before a stalled attempt is stopped, what it was doing (pippa_agent.forensics);
- ``conclude``: the attempt's failure class (pippa_contract.failures, from the facts that
  pippa_agent.attempt_facts gathers) and the retry by class (pippa_contract.retry), both recorded in
  the attempt;
- ``attempt_of``: ``attempt 2/4``, where the count grows with the retries that spend no budget;
- ``group_verdict``: in a run over several hosts, the failure every rank takes for a failed attempt.
"""

from __future__ import annotations

import os
import time

from pippa_agent import attempt_facts as af
from pippa_agent import forensics
from pippa_agent.supervise.group import Group, first_line, peer_lost
from pippa_contract import failures as fc
from pippa_contract import retry as rp
from pippa_contract import rundir as rd
from pippa_contract import stall as stl
from pippa_contract.alerts import healthy_gpus
from pippa_contract.attempts import DIVERGED, STALLED, STOPPED, budget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STALL_CHECK_S = 5.0  # how often a derived threshold is read again from metrics.jsonl
GROUP_WAIT_S = 30.0  # in a group: how long an ended attempt waits for the hub's word on the first failure


class StallWatch:
    """The attempt's stall threshold now (None: no watch yet, or none at all)."""

    def __init__(self, setting: object, recipe: bool, metrics: str, since: float) -> None:
        self.setting, self.recipe, self.metrics, self.since = setting, recipe, metrics, since
        self.threshold: float | None = None
        self.next_check = 0.0

    def now(self) -> float | None:
        if self.setting == stl.OFF:
            return None
        if isinstance(self.setting, (int, float)):
            return float(self.setting)
        if self.recipe and time.monotonic() >= self.next_check:  # derived: only a recipe run has steps
            self.threshold = af.stall_threshold(self.metrics, self.since, None)
            self.next_check = time.monotonic() + STALL_CHECK_S
        return self.threshold


def saving(run_dir: str, within_s: float) -> bool:
    """Whether a checkpoint is being written (a file under checkpoints/ changed within ``within_s``):
    a long save after a step is progress, not a hang."""
    now, root = time.time(), os.path.join(run_dir, rd.CHECKPOINTS)
    for base, dirs, files in os.walk(root):
        if base[len(root) :].count(os.sep) >= 3:
            dirs[:] = []
        for name in files:
            try:
                if now - os.stat(os.path.join(base, name)).st_mtime < within_s:
                    return True
            except OSError:
                continue
    return False


def capture(run_dir: str, attempt: dict[str, Any], pid: int) -> str:
    """Record the forensics of a stalled attempt in it; the directory, relative to the run's."""
    try:
        attempt["forensics"] = forensics.capture(run_dir, int(attempt["attempt"]), pid)
    except Exception as e:  # the capture must never keep a hung run from being ended
        attempt["forensics"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return os.path.relpath(forensics.attempt_dir(run_dir, int(attempt["attempt"])), run_dir)


def attempt_of(doc: dict[str, Any], policy: dict[str, Any], n: int) -> str:
    """``attempt n/m``: m is the budget (1 + --retry) plus the retries granted that spend none."""
    return f"attempt {n}/{budget(doc['attempts'], int(policy['max_attempts']), n)}"


def conclude(
    run_dir: str,
    doc: dict[str, Any],
    attempt: dict[str, Any],
    code: int,
    outcome: str,
    *,
    policy: dict[str, Any],
    recipe: bool,
    stopped: bool,
    oom_kills_before: int | None,
    pid: int | None,
    group: fc.Verdict | None = None,
) -> tuple[fc.Verdict, rp.Decision]:
    """The ended attempt's class and what to do about it, both written into ``attempt``. ``group``: the
    verdict of a run over several hosts (the rank that failed first), taken by every rank so that all
    decide alike; no smaller batch then (only rank 0 knows the batch from its metrics)."""
    verdict = group or af.verdict(
        run_dir,
        attempt,
        code,
        stopped=stopped,
        stalled_reason=attempt.get("reason") if outcome == STALLED else None,
        oom_kills_before=oom_kills_before,
        pids=[pid] if pid else [],
    )
    if stopped:
        attempt["outcome"] = STOPPED
    elif verdict.cls == fc.DIVERGED:
        attempt["outcome"] = DIVERGED
    batch = af.batch_of(os.path.join(run_dir, rd.METRICS)) if recipe and group is None else None
    decision = af.decide(doc, verdict, policy, batch)
    attempt.update(verdict.to_json())
    if isinstance(attempt.get("reason"), str):  # a log line may quote a token: recorded without it
        from pippa_contract.secretprints import host_redactor

        attempt["reason"] = host_redactor().line(attempt["reason"])
    if verdict.cls == fc.GPU_FAULT and verdict.gpu:
        attempt["gpu_index"] = af.gpu_index(verdict.gpu)  # for `pippa resume --gpus` on the others
    if verdict.cls == fc.COMPLETED:
        attempt["reason"] = None  # nothing to explain
    attempt["decision"] = {
        "retry": decision.retry,
        "spends": decision.spends,
        "why": decision.why,
        "batch": list(decision.batch) if decision.batch else None,
    }
    return verdict, decision


def fault_offer(run_dir: str, command: str, attempt: dict[str, Any]) -> str:
    """After a gpu-fault of a run pinned with ``--gpus``: the resume on the pinned GPUs left, offered
    (never taken): ``; on the other GPUs: pippa resume RUN --gpus 0,2,3``; else nothing."""
    index = attempt.get("gpu_index")
    rest = healthy_gpus(command, index if isinstance(index, int) else None)
    if rest is None:
        return ""
    return f"; GPU {index} faulted, on the other GPUs: pippa resume {os.path.basename(run_dir)} --gpus {rest}"


def group_verdict(
    group: Group | None, run_dir: str, attempt: dict[str, Any], code: int, outcome: str, stopped: bool
) -> fc.Verdict | None:
    """In a group (a run over several hosts), the verdict every rank takes for a failed attempt: the
    failure the hub judged first (this rank's own, reported now, may be it); None otherwise."""
    if group is None or stopped or (code == 0 and outcome != STALLED):
        return None
    n = attempt["attempt"]
    if group.first(n) is None and outcome != STALLED:  # a stall was reported when it was seen
        own = af.verdict(run_dir, attempt, code)
        tail = af.log_tail(os.path.join(run_dir, rd.OUTPUT_LOG), int(attempt.get("log_offset") or 0))
        group.report(n, own.cls, own.reason, float(attempt["end"]), peer_lost("\n".join(tail)))
    first = group.wait_first(n, GROUP_WAIT_S)
    if first is None:
        return None  # the hub is out of reach: this rank's own verdict
    attempt["first_failed"] = {"rank": first["rank"], "host": first["host"]}
    return fc.Verdict(first["class"], first_line(first, with_class=False))
