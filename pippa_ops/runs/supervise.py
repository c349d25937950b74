"""The host-side supervisor of a run with a restart policy: retry with resume, hang detection, records.

cmd.sh runs ``python3 -S -I RUN_DIR/supervise.py RUN_DIR`` in place of the job line when the run has
a ``restart`` policy in its run.json (``pippa run --retry N`` / ``--stall-timeout``, a recipe's
``[restart]`` table). It runs on the host inside the run's tmux session, so a run restarts while the
laptop sleeps. It runs the job line as a child in its own process group, waits for it, and:

- exit 0: done; exit 2 (a configuration or usage error), a stop the user asked for (Ctrl-C, ``pippa
  stop``: the ``stop_requested`` file), or a diverged run (metrics end line ``diverged``, unless the
  policy says ``retry_diverged``): no retry;
- any other end: after a capped, doubling backoff, the same line with ``--resume`` (a recipe run; a
  ``--cmd`` run reruns its line) in the same run directory, while attempts remain;
- no new metrics line for ``stall_timeout_s`` after the attempt's first step (no new output.log bytes
  for a ``--cmd`` run): SIGINT (the trainer saves), SIGCONT (a stopped process cannot save), up to
  ``grace_s``, then SIGKILL; the attempt ends ``stalled`` and is retried like a crash.

Every attempt is recorded in ``attempts.json`` (docs/CONTRACTS.md) and every event goes through one
function, ``Supervisor.emit``: a banner line in output.log, the record rewritten (tmp + rename).
The supervisor exits with the last attempt's exit code, so cmd.sh records it as before.

Python >= 3.8, standard library only: a host may have no training environment (``--cmd`` runs) and the
laptop imports the format half of this module (``summarize``) without running it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from typing import Callable

# pippa_ops.alerts.hostalerts.PROGRAM (this file is copied alone to the host: kept in step by a test)
ALERTS_PROGRAM = "~/.config/pippa/alerts/hostalerts.py"
# supervisor events told as they happen (the run's end is told by cmd.sh's run-end line)
MID_RUN_ALERTS = {"retrying": "retrying", "stalled": "stalled"}

ATTEMPTS_FILE = "attempts.json"
BACKOFF_S = 30.0  # the first wait before a retry; it doubles per attempt ...
BACKOFF_CAP_S = 600.0  # ... up to this
KILL_WAIT_S = 5.0  # after a hang-up: how long the job gets before SIGKILL
USAGE_EXIT = 2  # training_core's exit code for a bad recipe or setting: a retry would fail the same way
POLL_S = 0.5
TAIL_BYTES = 65536
# The copy of pippa_contract.runfacts.ERROR_LINE (the reason line of an attempt); tests/contract checks it.
_ERROR_LINE = re.compile(r"(Error|Exception|Traceback|error:|FAILED|Killed|[Ff]atal)")
_CHECKPOINT_RE = re.compile(r"^checkpoint-([0-9]+)$")

# Outcomes of an attempt (``attempts[i]["outcome"]``).
RUNNING, COMPLETED, FAILED, STALLED, DIVERGED, STOPPED, LOST = (
    "running", "completed", "failed", "stalled", "diverged", "stopped", "lost",
)  # fmt: skip


def policy_of(meta: dict) -> dict:
    """The run's restart policy from its run.json, with defaults (``max_attempts`` 1: no retry)."""
    got = meta.get("restart")
    raw: dict[str, object] = got if isinstance(got, dict) else {}
    stall = raw.get("stall_timeout_s")
    return {
        "max_attempts": max(1, int(str(raw.get("max_attempts") or 1))),
        "backoff_s": float(str(raw.get("backoff_s", BACKOFF_S))),
        "backoff_cap_s": float(str(raw.get("backoff_cap_s", BACKOFF_CAP_S))),
        "stall_timeout_s": float(str(stall)) if stall else None,
        "retry_diverged": bool(raw.get("retry_diverged", False)),
        "grace_s": float(str(raw.get("grace_s", 180.0))),
    }


def backoff(attempt: int, policy: dict) -> float:
    """The wait after attempt ``attempt`` (1-based) failed: backoff, 2x backoff, ... capped."""
    return min(policy["backoff_cap_s"], policy["backoff_s"] * 2 ** max(0, attempt - 1))


def summarize(doc: object) -> dict | None:
    """What ``ps`` shows of an attempts.json: attempt now (or last), max, last outcome, reason (pure)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("attempts"), list):
        return None
    attempts = [a for a in doc["attempts"] if isinstance(a, dict)]
    if not attempts:
        return None
    last = attempts[-1]
    return {
        "attempt": len(attempts),
        "max_attempts": int(doc.get("max_attempts") or len(attempts)),
        "outcome": str(last.get("outcome") or ""),
        "reason": last.get("reason"),
        "next_at": doc.get("next_at"),
        "gave_up": bool(doc.get("gave_up")),
    }


def read_json(path: str) -> object:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def write_json(path: str, doc: object) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(doc) + "\n")
    os.replace(tmp, path)


def file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def tail_text(path: str, start: int, nbytes: int = TAIL_BYTES) -> list[str]:
    """The last lines of ``path`` written after byte ``start``."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(start, size - nbytes))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def drain_output(log: str, timeout_s: float = 2.0) -> None:
    """Wait until what the attempt wrote has reached ``log``: cmd.sh pipes this process's stdout (and
    the job's) through ``tee -a`` into output.log, so a line the job printed just before it exited may
    still sit in the pipe. Done when the pipe holds nothing (FIONREAD) and the file's size held for
    50 ms; at most ``timeout_s``."""
    deadline, last = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        try:
            pending = struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            pending = 0  # stdout is not a pipe (a test, a terminal): nothing to wait for
        size = file_size(log)
        if pending == 0 and size == last:
            return
        last = size
        time.sleep(0.05)


def reason_line(log: str, start: int) -> str | None:
    """The attempt's last error-like line in output.log (else its last line), one line."""
    lines = [ln.strip() for ln in tail_text(log, start) if ln.strip() and not ln.startswith("pippa: ")]
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else None


def last_metrics(path: str) -> tuple[float | None, dict | None]:
    """The ``time`` of the newest step or eval line of metrics.jsonl, and its end line when last."""
    newest, end = None, None
    for line in tail_text(path, 0, 8192)[-20:]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        kind, when = rec.get("type"), rec.get("time")
        if kind in ("step", "eval") and isinstance(when, (int, float)):
            newest, end = float(when), None
        elif kind == "end":
            end = rec
        elif kind == "header":
            newest, end = None, None
    return newest, end


def newest_checkpoint(run_dir: str) -> int | None:
    try:
        names = os.listdir(os.path.join(run_dir, "checkpoints"))
    except OSError:
        return None
    steps = [int(m.group(1)) for m in (_CHECKPOINT_RE.match(n) for n in names) if m]
    return max(steps) if steps else None


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: its code, or 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


def child_setup() -> Callable[[], None]:
    """What the child runs before exec: its own process group (so a hang can be ended as one), and
    SIGKILL when the supervisor dies (Linux's PR_SET_PDEATHSIG), so a killed supervisor leaves no
    trainer behind. libc is loaded here, in the parent: the child only calls it."""
    prctl = None
    try:
        import ctypes

        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        pass

    def setup() -> None:
        os.setpgrp()
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return setup


class Supervisor:
    """One run's attempts. ``run`` returns the exit code cmd.sh records."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        meta = read_json(os.path.join(run_dir, "run.json"))
        self.meta = meta if isinstance(meta, dict) else {}
        self.policy = policy_of(self.meta)
        self.command = str(self.meta.get("command") or "")
        self.recipe = self.meta.get("recipe")
        self.path = os.path.join(run_dir, ATTEMPTS_FILE)
        self.log = os.path.join(run_dir, "output.log")
        self.metrics = os.path.join(run_dir, "metrics.jsonl")
        old = read_json(self.path)
        self.doc: dict = old if isinstance(old, dict) and isinstance(old.get("attempts"), list) else {}
        self.doc["max_attempts"] = self.policy["max_attempts"]
        self.doc.setdefault("attempts", [])
        self.doc["next_at"] = None
        self.doc["gave_up"] = False
        self.child: subprocess.Popen | None = None
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
        """Tell PIPPA_NOTIFY (pippa_ops.alerts, when ``pippa up`` installed it) in the background: the
        run's end is told by cmd.sh; these are the events in between. The reason is read from the
        run's files by the alerts program (redacted there), never passed in argv."""
        program = os.path.expanduser(ALERTS_PROGRAM)
        if not os.path.isfile(program):
            return
        argv = [sys.executable or "python3", "-S", program, "event", "--run-dir", self.run_dir,
                "--state", state, "--detach"]  # fmt: skip
        with contextlib.suppress(OSError):
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    # -- attempts ----------------------------------------------------------------------------------
    def stop_requested(self) -> bool:
        return os.path.exists(os.path.join(self.run_dir, "stop_requested"))

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

    def start(self, n: int) -> dict:
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

    def watch(self, attempt: dict) -> tuple[int, str]:
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

    def stalled_for(self, attempt: dict) -> float:
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

    def reason(self, attempt: dict, code: int) -> str:
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


# Copies of pippa_contract (rundir.RUN_STATE_FILES, names.SESSION_RE; reopen_run_dir as
# pippa_agent.host's) and of pippa_ops.runs.tmux (IDENTITY_FORMAT, session_argv): this file runs alone
# on the host at boot. tests/contract checks the copies against the originals.
RUN_STATE_FILES = ("exit_code", "exit_code.tmp", "started", "stop_requested", "tmux_session")
SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
IDENTITY_FORMAT = "#{session_id}@#{session_created}"


def recover_lost(remote_dir: str) -> dict:
    """What ``recover_on_boot`` runs (cron @reboot): start again, each in its own tmux session, every
    supervised run of ``remote_dir`` that ended with no exit code, no stop and no live session, and
    has attempts left. Its cmd.sh runs this supervisor again, which counts the lost attempt."""
    import shlex

    out: dict = {"resumed": [], "skipped": []}
    base = os.path.join(os.path.expanduser(remote_dir), "runs")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        d = os.path.join(base, name)
        meta = read_json(os.path.join(d, "run.json"))
        if not isinstance(meta, dict) or not isinstance(meta.get("restart"), dict):
            continue
        ended = any(os.path.exists(os.path.join(d, f)) for f in ("exit_code", "stop_requested", "slurm_job"))
        if ended or not os.path.exists(os.path.join(d, "started")):
            continue
        session = str(meta.get("session") or "")
        if not SESSION_RE.match(session) or not os.path.exists(os.path.join(d, "cmd.sh")):
            continue
        if subprocess.run(["tmux", "has-session", "-t", "=" + session], capture_output=True).returncode == 0:
            continue  # running, or its session is taken: not lost
        summary = summarize(read_json(os.path.join(d, ATTEMPTS_FILE)))
        if isinstance(meta.get("hosts"), list) and len(meta["hosts"]) > 1:
            out["skipped"].append([name, "a run over several hosts"])
            continue
        if summary is None or summary["attempt"] >= policy_of(meta)["max_attempts"]:
            out["skipped"].append([name, "no attempts left"])
            continue
        for state in RUN_STATE_FILES:
            if os.path.lexists(os.path.join(d, state)):
                os.unlink(os.path.join(d, state))
        meta["resumed"] = [*meta.get("resumed", []), time.time()]
        write_json(os.path.join(d, "run.json"), meta)
        job = "trap : INT; sh " + shlex.quote(os.path.join(d, "cmd.sh"))
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
        with open(os.path.join(d, "tmux_session"), "w") as f:
            f.write(p.stdout.decode().strip() + "\n")
        out["resumed"].append([name, session])
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--recover":
        sys.stdout.write(json.dumps(recover_lost(argv[2])) + "\n")
        return 0
    if len(argv) != 2:
        sys.stderr.write("usage: supervise.py RUN_DIR | --recover REMOTE_DIR\n")
        return USAGE_EXIT
    sup = Supervisor(os.path.abspath(argv[1]))
    signal.signal(signal.SIGINT, sup.on_interrupt)
    signal.signal(signal.SIGTERM, sup.on_hangup)
    signal.signal(signal.SIGHUP, sup.on_hangup)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
