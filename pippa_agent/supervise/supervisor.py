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
it as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from pippa_agent.program import program_file
from pippa_agent.supervise.files import (
    POLL_S,
    child_setup,
    drain_output,
    exit_status,
    file_size,
    last_metrics,
    newest_checkpoint,
    read_json,
    reason_line,
    write_json,
)
from pippa_contract import rundir as rd
from pippa_contract.attempts import (
    COMPLETED,
    DIVERGED,
    FAILED,
    LOST,
    RUNNING,
    STALLED,
    STOPPED,
    USAGE_EXIT,
    backoff,
    policy_of,
)
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR

# supervisor events told as they happen (the run's end is told by cmd.sh's run-end line)
MID_RUN_ALERTS = {"retrying": "retrying", "stalled": "stalled"}
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
        old = read_json(self.path)
        kept = isinstance(old, dict) and isinstance(old.get("attempts"), list)
        self.doc: dict[str, Any] = old if kept and isinstance(old, dict) else {}
        self.doc["max_attempts"] = self.policy["max_attempts"]
        self.doc.setdefault("attempts", [])
        self.doc["next_at"] = None
        self.doc["gave_up"] = False
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.setup = child_setup()

    # -- the one place an event leaves the supervisor ---------------------------------------------
    def emit(self, event: str, message: str | None = None) -> None:
        """Record the attempts and tell output.log. ``event``: started, ended, retrying, stalled,
        diverged, gave_up, finished, stopped. (The place to hook alerts on.)"""
        write_json(self.path, self.doc)
        if event in MID_RUN_ALERTS:
            self.alert(MID_RUN_ALERTS[event])
        if message:
            try:
                sys.stdout.write(f"pippa: {message}\n")
                sys.stdout.flush()
            except OSError:
                pass  # the pane and its tee are gone (a hang-up): the record above is what counts

    def alert(self, state: str) -> None:
        """Tell PIPPA_NOTIFY (when ``pippa up`` set alerts up) in the background, through this same
        host program's ``alerts``: the run's end is told by cmd.sh; these are the events in between.
        The reason is read from the run's files by the alerts program (redacted there), never argv."""
        program = program_file()
        alerts_on = os.path.isfile(os.path.join(os.path.expanduser(ALERTS_DIR), ALERTS_CONFIG))
        if program is None or not alerts_on:
            return
        argv = [sys.executable or "python3", "-S", "-I", program, "alerts", "event", "--run-dir",
                self.run_dir, "--state", state, "--detach"]  # fmt: skip
        with contextlib.suppress(OSError):
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    # -- attempts ----------------------------------------------------------------------------------
    def stop_requested(self) -> bool:
        return os.path.exists(os.path.join(self.run_dir, rd.STOP_REQUESTED))

    def close_lost(self) -> None:
        """An attempt left running by a supervisor that died with its session (reboot, tmux killed)."""
        for a in self.doc["attempts"]:
            if a.get("outcome") == RUNNING:
                log_time = os.path.getmtime(self.log) if os.path.exists(self.log) else time.time()
                a.update(end=log_time, outcome=LOST, reason="the session ended with no exit code")

    def run(self) -> int:
        self.close_lost()
        code = 0
        while True:
            if self.stop_requested():
                self.emit("stopped", "stop requested: no further attempt")
                return code or 130
            n = len(self.doc["attempts"]) + 1
            attempt = self.start(n)
            code, outcome = self.watch(attempt)
            attempt.update(end=time.time(), exit_code=code, outcome=outcome)
            if outcome != COMPLETED and not attempt.get("reason"):
                attempt["reason"] = self.reason(attempt, code)
            why = attempt.get("reason") or ""
            of = f"attempt {n}/{self.policy['max_attempts']}"
            if outcome == COMPLETED:
                self.emit("finished", f"{of} completed" if n > 1 else None)
                return 0
            if outcome == STOPPED or self.stop_requested():
                attempt["outcome"] = STOPPED
                self.emit("stopped", f"{of} stopped (exit {code}): not retried")
                return code
            if code == USAGE_EXIT and outcome == FAILED:
                self.doc["gave_up"] = True
                self.emit("gave_up", f"{of} failed with exit 2 (configuration or usage error): not retried")
                return code
            if outcome == DIVERGED and not self.policy["retry_diverged"]:
                self.doc["gave_up"] = True
                self.emit("diverged", f"{of} diverged: {why}; not retried (--retry-diverged retries it)")
                return code
            if n >= self.policy["max_attempts"]:
                self.doc["gave_up"] = n > 1
                last = f"{of} {outcome} (exit {code}): {why}; no attempts left"
                self.emit("gave_up", last if n > 1 else None)
                return code
            wait = backoff(n, self.policy)
            self.doc["next_at"] = time.time() + wait
            self.emit("retrying", f"{of} {outcome} (exit {code}): {why}")
            self.emit(
                "retrying",
                f"attempt {n + 1}/{self.policy['max_attempts']} in {wait:g}s, with --resume"
                if self.recipe
                else f"attempt {n + 1}/{self.policy['max_attempts']} in {wait:g}s",
            )
            if not self.sleep(wait):
                self.doc["next_at"] = None
                self.emit("stopped", "stopped while waiting: no further attempt")
                return code
            self.doc["next_at"] = None

    def start(self, n: int) -> dict[str, Any]:
        resume = n > 1 and self.recipe is not None
        line = f"{self.command} --resume" if resume else self.command
        attempt = {
            "attempt": n,
            "start": time.time(),
            "end": None,
            "exit_code": None,
            "resumed_from_step": newest_checkpoint(self.run_dir) if resume else None,
            "reason": None,
            "outcome": RUNNING,
            "log_offset": file_size(self.log),
        }
        self.doc["attempts"].append(attempt)
        if n > 1:
            at = attempt["resumed_from_step"]
            frm = f" from step {at}" if at is not None else ""
            if at is None and resume:
                frm = " (no checkpoint yet: from the start)"
            self.emit("started", f"===== attempt {n}/{self.policy['max_attempts']}{frm} =====")
        else:
            self.emit("started")
        self.child = subprocess.Popen(["sh", "-c", line], preexec_fn=self.setup)
        if self.stopping:  # Ctrl-C came while it started
            self.signal_group(signal.SIGINT)
        return attempt

    def watch(self, attempt: dict[str, Any]) -> tuple[int, str]:
        """Wait for the attempt's job; end it when it stalls. Its exit status and outcome."""
        child = self.child
        assert child is not None
        stall = self.policy["stall_timeout_s"]
        stalled = False
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if stall and not stalled and self.stalled_for(attempt) > stall:
                stalled = True
                attempt["reason"] = f"no new {'metrics line' if self.recipe else 'output'} for {stall:g}s"
                self.emit("stalled", f"attempt {attempt['attempt']} stalled: {attempt['reason']}; ending it")
                rc = self.end_child(self.policy["grace_s"])
                break
        code = exit_status(rc)
        if stalled:
            return code, STALLED
        if self.stopping:
            return code, STOPPED
        _, end = last_metrics(self.metrics)
        if self.recipe is not None and isinstance(end, dict) and end.get("status") == "diverged":
            attempt["reason"] = str(end.get("error") or "a loss or reward became NaN or infinite")
            return code, DIVERGED
        return code, COMPLETED if code == 0 else FAILED

    def stalled_for(self, attempt: dict[str, Any]) -> float:
        """Seconds since the attempt's last progress; 0 before its first step (model download and
        start-up never count). A recipe run's progress is a metrics line, a command's its output."""
        now = time.time()
        if self.recipe is not None:
            newest, _ = last_metrics(self.metrics)
            if newest is None or newest < attempt["start"]:
                return 0.0
            try:
                return now - max(newest, os.path.getmtime(self.metrics))
            except OSError:
                return 0.0
        if file_size(self.log) <= attempt["log_offset"]:
            return 0.0
        try:
            return now - os.path.getmtime(self.log)
        except OSError:
            return 0.0

    def end_child(self, grace_s: float) -> int:
        """SIGINT the job's group (the trainer saves), SIGCONT (a stopped one cannot), wait ``grace_s``,
        then SIGKILL what is left."""
        child = self.child
        assert child is not None
        for sig in (signal.SIGINT, signal.SIGCONT):
            self.signal_group(sig)
        try:
            return int(child.wait(timeout=grace_s))
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            return int(child.wait())

    def signal_group(self, sig: int) -> None:
        if self.child is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.child.pid, sig)

    def reason(self, attempt: dict[str, Any], code: int) -> str:
        drain_output(self.log)
        if code > 128:
            try:
                name = signal.Signals(code - 128).name
            except ValueError:
                name = ""
            line = reason_line(self.log, attempt["log_offset"])
            killed = f"killed by {name or 'signal ' + str(code - 128)}"
            return killed + (f" (last line: {line})" if line else "")
        return reason_line(self.log, attempt["log_offset"]) or f"exit {code}"

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
        for a in self.doc["attempts"]:
            if a.get("outcome") == RUNNING:
                a.update(end=time.time(), outcome=STOPPED if self.stop_requested() else LOST,
                         reason=f"the session ended (signal {signum})")  # fmt: skip
        self.doc["next_at"] = None
        self.emit("lost")
        os._exit(128 + signum)
