"""The host-side supervisor of a run with a restart policy: retry with resume, hang detection, records.

cmd.sh runs ``python3 -S -I "$RUN_DIR/agent.pyz" supervise "$RUN_DIR"`` (the host program, see
pippa_contract.hostdirs) in place of the job line when the run has a ``restart`` policy in its
run.json (``pippa run --retry N`` / ``--stall-timeout``, a recipe's ``[restart]`` table). It runs on
the host inside the run's tmux session, so a run restarts while the laptop sleeps. It runs the job
line as a child in its own process group, waits for it, and:

- exit 0: done; exit 2 (a configuration or usage error), a stop the user asked for (Ctrl-C, ``pippa
  stop``: the ``stop_requested`` file), or a diverged run (metrics end line ``diverged``, unless the
  policy says ``retry_diverged``): no retry;
- any other end: after a capped, doubling backoff, the same line with ``--resume`` (a recipe run; a
  ``--cmd`` run reruns its line) in the same run directory, while attempts remain;
- no new metrics line for ``stall_timeout_s`` after the attempt's first step (no new output.log bytes
  for a ``--cmd`` run): SIGINT (the trainer saves), SIGCONT (a stopped process cannot save), up to
  ``grace_s``, then SIGKILL; the attempt ends ``stalled`` and is retried like a crash.

Every attempt is recorded in ``attempts.json`` (docs/CONTRACTS.md; pippa_contract.attempts) and every
event goes through one function, ``Supervisor.emit``: a banner line in output.log, the record
rewritten (tmp + rename). The supervisor exits with the last attempt's exit code, so cmd.sh records
it as before; an attempt of an infrastructure class it does not retry (``--infra-retries`` spent or 0,
a GPU fault, a lost session) ends it with that class's status instead (pippa_contract.exitcodes), for
an engine outside that retries by status. SIGUSR1 / SIGUSR2 (a scheduler's time limit, a preemption)
go on to the job, which saves and ends ``timelimit`` / ``preempted``, not retried here.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time

from pippa_agent import attempt_facts as af
from pippa_agent import forensics
from pippa_agent.supervise import jobtree
from pippa_agent.supervise.alert import alert as send_alert
from pippa_agent.supervise.budget import Budget, price_s, save_time, step_span
from pippa_agent.supervise.ending import (
    StallWatch,
    attempt_of,
    capture,
    conclude,
    fault_offer,
    group_verdict,
    saving,
)
from pippa_agent.supervise.files import (
    POLL_S,
    child_setup,
    drain_output,
    exit_status,
    file_size,
    read_json,
    say,
    stalled_for,
)
from pippa_agent.supervise.group import Group, first_line, group_of
from pippa_contract import diskspace as disk
from pippa_contract import exitcodes as ec
from pippa_contract import failures as fc
from pippa_contract import rundir as rd
from pippa_contract import stall as stl
from pippa_contract.attempts import (
    COMPLETED,
    FAILED,
    LOST,
    RUNNING,
    STALLED,
    STOPPED,
    backoff,
    policy_of,
)
from pippa_contract.checkpoint_check import CHECKED_ENV, pick
from pippa_contract.records import attempts_from_log, read_record, write_record

# supervisor events told as they happen (the run's end is told by cmd.sh's run-end line): exactly one
# per retry ("retrying" carries the attempt, class, reason and backoff), and one when the run is lost
MID_RUN_ALERTS = {"retrying": "retrying", "lost": "lost", "budget": "budget"}
KILL_WAIT_S = 5.0  # after a hang-up: how long the job gets before SIGKILL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Supervisor:
    """One run's attempts. ``run`` returns the exit code cmd.sh records."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        meta = read_json(os.path.join(run_dir, rd.RUN_JSON))
        self.meta = meta if isinstance(meta, dict) else {}
        self.policy = policy_of(self.meta)
        self.command = str(self.meta.get("command") or "")
        self.recipe = self.meta.get("recipe")
        self.path = os.path.join(run_dir, rd.ATTEMPTS_JSON)
        self.log = os.path.join(run_dir, rd.OUTPUT_LOG)
        self.metrics = os.path.join(run_dir, rd.METRICS)
        old = read_record(self.path, lambda: attempts_from_log(self.log))  # a torn one repaired
        kept = isinstance(old, dict) and isinstance(old.get("attempts"), list)
        self.doc: dict[str, Any] = old if kept and isinstance(old, dict) else {}
        self.doc["max_attempts"] = self.policy["max_attempts"]
        self.doc["infra_retries"] = self.policy["infra_retries"]
        self.doc.setdefault("overrides", [])  # the --set arguments of an OOM retry (half the batch)
        self.doc.setdefault("attempts", [])
        self.doc["next_at"] = None
        self.doc["gave_up"] = False
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.setup = child_setup()
        self.oom_kills_before: int | None = None
        self.asked: int | None = None  # SIGUSR1 / SIGUSR2 passed on to the job (a save for an outside engine)
        self.price_s, currency = price_s(self.command)
        self.budget = Budget(self.policy.get("budget"), currency)
        g = group_of(self.meta)  # a run over several hosts: its ranks' supervisors fail together (.group)
        self.group = Group(*g, stopped=self.job_stopped) if g else None
        self.reserve = disk.Reserve(run_dir)  # room for the record when the disk fills (diskspace)

    # -- the one place an event leaves the supervisor ---------------------------------------------
    def emit(self, event: str, message: str | None = None) -> None:
        """Record the attempts and tell output.log. ``event``: started, ended, retrying, stalled,
        diverged, gave_up, finished, stopped, lost. (The place to hook alerts on: the alerts program reads
        the event's line from attempts.json's ``event``, never from argv.)"""
        self.doc["event"] = {"event": event, "message": message, "time": time.time()}
        self.record()
        if event in MID_RUN_ALERTS:
            self.alert(MID_RUN_ALERTS[event])
        if message:
            say(message)

    def record(self) -> None:
        """attempts.json rewritten; on a full disk (ENOSPC, EDQUOT) with the reserve given back and
        tried once more, else left as it was (the document stays in memory for the next event)."""
        for _ in range(2):
            try:
                write_record(self.path, self.doc)
                return
            except OSError as e:
                if not (disk.is_full(e) and self.reserve.release()):
                    return

    def alert(self, state: str) -> None:
        send_alert(self.run_dir, state)

    # -- attempts ----------------------------------------------------------------------------------
    def stop_requested(self) -> bool:
        return os.path.exists(os.path.join(self.run_dir, rd.STOP_REQUESTED))

    def close_lost(self) -> None:
        """An attempt left running by a supervisor that died with its session (reboot, tmux killed)."""
        for a in self.doc["attempts"]:
            if a.get("outcome") == RUNNING:
                log_time = os.path.getmtime(self.log) if os.path.exists(self.log) else time.time()
                a.update(end=log_time, outcome=LOST, reason="the session ended with no exit code")
                a.setdefault("class", fc.LOST)

    def run(self) -> int:
        self.close_lost()
        if self.group is not None:
            self.group.start()
        code = 0
        while True:
            if self.stop_requested():
                self.emit("stopped", "stop requested: no further attempt")
                return code or 130
            n = len(self.doc["attempts"]) + 1
            attempt = self.start(n)
            code, outcome = self.watch(attempt)
            attempt.update(end=time.time(), exit_code=code, outcome=outcome)
            attempt.update(step_span(self.metrics, attempt["start"], attempt["end"]))
            attempt.update(save_time(os.path.join(self.run_dir, rd.SAVES), attempt["start"], attempt["end"]))
            drain_output(self.log)
            stopped = outcome == STOPPED or self.stop_requested()
            verdict, decision = conclude(
                self.run_dir,
                self.doc,
                attempt,
                code,
                outcome,
                policy=self.policy,
                recipe=self.recipe is not None,
                stopped=stopped,
                oom_kills_before=self.oom_kills_before,
                pid=self.child.pid if self.child else None,
                group=group_verdict(self.group, self.run_dir, attempt, code, outcome, stopped),
            )
            attempt["checked_at"] = time.time()  # its checks ended (the ledger's health part)
            if self.budget.hit:  # ended at its budget, its checkpoint saved: never retried
                verdict = fc.Verdict(fc.BUDGET, f"budget reached: {self.budget.said(self.doc, time.time())}")
                attempt.update(verdict.to_json())
                attempt["decision"] = {
                    "retry": False,
                    "spends": None,
                    "why": "its budget is spent",
                    "batch": None,
                }
                self.doc["gave_up"] = True
                self.emit("gave_up", f"attempt {n} ended at its budget (exit {code}): not retried")
                return code or 1
            said, of = fc.label(verdict.cls, verdict.reason), attempt_of(self.doc, self.policy, n)
            if verdict.cls == fc.COMPLETED:
                self.emit("finished", f"{of} completed" if n > 1 else None)
                return 0
            if verdict.cls == fc.STOPPED:
                self.emit("stopped", f"{of} stopped (exit {code}): not retried")
                return code
            if not decision.retry:
                final = verdict.cls in (fc.CONFIG, fc.DIVERGED, fc.GPU_FAULT)
                self.doc["gave_up"] = n > 1 or final
                quiet = n == 1 and not final and verdict.cls != fc.OOM  # a single attempt, nothing asked
                self.emit(
                    "diverged" if verdict.cls == fc.DIVERGED else "gave_up",
                    None
                    if quiet
                    else f"{of} {said} (exit {code}): {decision.why}"
                    + fault_offer(self.run_dir, self.command, attempt),
                )
                return ec.tree_exit(verdict.cls, code)
            if decision.batch is not None:
                self.doc["overrides"] = decision.set_args()
            wait = backoff(n, self.policy)
            self.doc["next_at"] = time.time() + wait
            resume = ", with --resume" if self.recipe else ""
            self.emit(
                "retrying", f"{of} {said} (exit {code}); {decision.why}; attempt {n + 1} in {wait:g}s{resume}"
            )
            if not self.sleep(wait):
                self.doc["next_at"] = None
                self.emit("stopped", "stopped while waiting: no further attempt")
                return code
            self.doc["next_at"] = None

    def start(self, n: int) -> dict[str, Any]:
        resume = n > 1 and self.recipe is not None
        line = f"{self.command} --resume" if resume else self.command
        if self.doc.get("overrides"):  # an OOM retry's smaller batch, for the rest of the run
            line += " " + " ".join(shlex.quote(str(a)) for a in self.doc["overrides"])
        step, skipped = pick(os.path.join(self.run_dir, rd.CHECKPOINTS)) if resume else (None, [])
        for passed in skipped:  # torn checkpoints, set aside: one line each
            say(f"resume: {passed}")
        attempt = {
            "attempt": n,
            "start": time.time(),
            "end": None,
            "exit_code": None,
            "resumed_from_step": step,
            "skipped_checkpoints": skipped,
            "reason": None,
            "outcome": RUNNING,
            "log_offset": file_size(self.log),
            "price_s": self.price_s,  # what a second of it costs here (pippa_contract.ledger)
        }
        self.doc["attempts"].append(attempt)
        if n > 1:
            at = attempt["resumed_from_step"]
            frm = f" from step {at}" if at is not None else ""
            if at is None and resume:
                frm = " (no checkpoint yet: from the start)"
            self.emit("started", f"===== {attempt_of(self.doc, self.policy, n)}{frm} =====")
        else:
            self.emit("started")
        self.oom_kills_before = af.cgroup_oom_kills()
        # NCCL ranks keep a Flight Recorder trace and dump it when asked (no effect without NCCL)
        env = {**os.environ, **forensics.flight_recorder_env(self.run_dir, n)} if self.recipe else None
        if env is not None and step is not None:  # checked above: the trainer need not hash it again
            env[CHECKED_ENV] = rd.checkpoint_name(step)
        # A recipe's line is one simple command (pippa_ops.runs.launching.script): exec'd, the trainer
        # is the child and its exit status the attempt's. Under a waiting sh, a Ctrl-C that came during the
        # last step read as 130 (sh dies of the SIGINT it was sent) though the trainer saved that step and
        # exited 0.
        argv = ["sh", "-c", f"exec {line}" if self.recipe is not None else line]
        self.child = subprocess.Popen(argv, preexec_fn=self.setup, env=env)
        if self.stopping:  # Ctrl-C came while it started
            self.signal_group(signal.SIGINT)
        return attempt

    def watch(self, attempt: dict[str, Any]) -> tuple[int, str]:
        """Wait for the attempt's job; end it when it stalls (its forensics captured first). Its exit
        status and outcome (a divergence is the classifier's to see: pippa_contract.failures)."""
        child = self.child
        assert child is not None
        stall = StallWatch(
            self.policy["stall_timeout_s"], self.recipe is not None, self.metrics, attempt["start"]
        )
        stalled = False
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            first = self.group.first(attempt["attempt"]) if self.group is not None else None
            if first is not None:  # a rank failed (this one, if its job is stopped): end the attempt here too
                self.emit("group", f"attempt {attempt['attempt']}: {first_line(first)}; ending this rank's")
                rc = self.end_child(self.policy["grace_s"])
                break
            limit = stall.now()
            quiet = stalled_for(self.recipe, self.metrics, self.log, attempt) if limit else 0.0
            if limit and quiet > limit and not saving(self.run_dir, limit):
                stalled = True
                attempt["stall_threshold_s"] = limit
                attempt["reason"] = stl.reason(limit, self.recipe is not None)
                if self.group is not None:  # the other ranks end theirs (and their SIGCONT lets all save)
                    self.group.report(attempt["attempt"], fc.STALLED, attempt["reason"], time.time(), True)
                where = capture(self.run_dir, attempt, child.pid)
                self.emit(
                    "stalled",
                    f"attempt {attempt['attempt']} stalled: {attempt['reason']}; ending it "
                    f"(what it was doing: {where}/)",
                )
                rc = self.end_child(self.policy["grace_s"])
                break
            due = self.budget.check(self.doc, time.time(), self.run_dir)
            if due == "alert":
                self.emit("budget", f"{self.budget.said(self.doc, time.time())}: it stops at its budget")
            elif due == "stop":
                self.emit("budget", f"{self.budget.said(self.doc, time.time())}: saving and stopping")
                rc = self.end_child(self.policy["grace_s"])
                break
        code = exit_status(rc)
        asked = ec.signal_class(self.asked)
        if asked is not None and code not in (0, ec.INFRA_EXIT[asked]):  # a job that had no save to make
            code = ec.INFRA_EXIT[asked]
        if stalled:
            return code, STALLED
        if self.stopping:
            return code, STOPPED
        return code, COMPLETED if code == 0 else FAILED

    def end_child(self, grace_s: float) -> int:
        assert self.child is not None
        return jobtree.end(self.child, grace_s)

    def job_stopped(self) -> str | None:
        return jobtree.stopped(self.child)

    def signal_tree(self, sig: int) -> None:
        jobtree.signal_tree(self.child, sig)

    def signal_group(self, sig: int) -> None:
        jobtree.signal_group(self.child, sig)

    def sleep(self, seconds: float) -> bool:
        """Wait before a retry; False when a stop arrives meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stopping or self.stop_requested():
                return False
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        return not (self.stopping or self.stop_requested())

    # -- signals -------------------------------------------------------------------------------------
    def on_interrupt(self, signum: int, frame: object) -> None:
        """Ctrl-C in the pane (``pippa stop``): pass it on to the job (it saves), retry nothing."""
        self.stopping = True
        self.signal_group(signum)

    def on_save_signal(self, signum: int, frame: object) -> None:
        """SIGUSR1 / SIGUSR2 from a scheduler: the job saves and ends with the signal's class."""
        self.asked = signum
        self.signal_group(signum)

    def on_hangup(self, signum: int, frame: object) -> None:
        """The session is going (``tmux kill-session``: SIGHUP; a shutdown: SIGTERM, and the trainer
        saves): end the job with it and record the attempt; a run nobody asked to stop is ``lost``
        and ``pippa recover`` resumes it."""
        self.signal_group(signum)
        child = self.child
        if child is not None:
            try:
                child.wait(timeout=KILL_WAIT_S if signum == signal.SIGHUP else self.policy["grace_s"])
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
        stopped = self.stop_requested()
        for a in self.doc["attempts"]:
            if a.get("outcome") == RUNNING:
                a.update(
                    end=time.time(),
                    outcome=STOPPED if stopped else LOST,
                    reason=f"the session ended (signal {signum})",
                )
                a["class"] = fc.STOPPED if stopped else fc.LOST
        self.doc["next_at"] = None
        if stopped:
            self.emit("stopped")
        else:  # one alert: the run needs `pippa recover` (or the @reboot line) to go on
            n = len(self.doc["attempts"])
            self.emit(
                "lost", f"attempt {n} lost: the session ended (signal {signum}); pippa recover resumes it"
            )
        self.reserve.release()
        os._exit(128 + signum if stopped else ec.INFRA_EXIT[fc.LOST])
