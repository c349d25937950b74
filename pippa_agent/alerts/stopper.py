"""A meter that stops itself: the host entry's ``stop`` command, run by the host's watcher when one of
``stop_when`` says the box has nothing left to do, so a run that ends at 02:00 does not bill until 09:00.

- ``done``: the last pippa run the watcher saw going ended and nothing else goes on or waits (a queued
  run of a sweep keeps its session, so it counts as going);
- ``stalled``: a run ended stalled with no retry left (its supervisor gave up: attempts.json);
- ``budget``: a run ended at its ``--budget`` (class ``budget``: pippa_agent.supervise.budget);
- ``idle:30m``: every GPU under the idle threshold (idle_alert's rule), no pippa run going or queued and
  no tmux client attached, for that long.

Each trigger fires once (``stop.json`` keeps what fired, across a restart of the watcher). It arms the
stop: an alert at once (what, when, and how to cancel: ``pippa keep HOST``), the command ``stop_notice_s``
later (config.json; default 5 minutes), and never while a checkpoint is being written (a file under a
run's ``checkpoints/`` changed within ``SAVE_QUIET_S``: it waits for the save to end). A run that starts
meanwhile disarms ``done`` and ``idle``. The command runs once, in its own session, with its output in
``stop.log``; after ``stop_timeout_s`` (default 300 s) it is killed. Either way an alert says how it
ended (exit status and its last line), and it is never retried.

Python >= 3.8, standard library and pippa_contract only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from pippa_agent.alerts.files import ended_since, here, read_json, tail_lines, write_json
from pippa_contract import rundir as rd
from pippa_contract.alerts import format_elapsed
from pippa_contract.hostdirs import STOP_CANCEL, STOP_STATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

STOP_LOG = "stop.log"
NOTICE_S = 300.0
TIMEOUT_S = 300.0
SAVE_QUIET_S = 30.0  # a checkpoint file changed this recently: a save is going on


def saving(run_dir: str, now: float | None = None) -> bool:
    """Whether a checkpoint of the run is being written: a file in a staging directory of its
    ``checkpoints/`` (the trainer writes ``checkpoints/.staging`` and renames it when whole) changed
    within ``SAVE_QUIET_S``, or any other file there within ``SAVE_QUIET_S / 6``."""
    now = time.time() if now is None else now
    root = os.path.join(run_dir, rd.CHECKPOINTS)
    for base, dirs, files in os.walk(root):
        rel = base[len(root) :]
        if rel.count(os.sep) >= 3:
            dirs[:] = []
        quiet = SAVE_QUIET_S if rel.startswith(os.sep + ".") else SAVE_QUIET_S / 6
        for name in files:
            with contextlib.suppress(OSError):
                if now - os.stat(os.path.join(base, name)).st_mtime < quiet:
                    return True
    return False


def ended_as(run_dir: str) -> str | None:
    """The class of an ended run's last attempt (``stalled`` with no retry left, ``budget``, ...)."""
    doc = read_json(os.path.join(run_dir, rd.ATTEMPTS_JSON))
    attempts = doc.get("attempts") if isinstance(doc, dict) else None
    last = attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else {}
    cls = last.get("class")
    return str(cls) if cls and os.path.exists(os.path.join(run_dir, rd.EXIT_CODE)) else None


def attached_clients() -> int:
    """How many tmux clients are attached on this host user (someone is looking: not idle)."""
    try:
        p = subprocess.run(
            ["tmux", "list-clients"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([ln for ln in p.stdout.splitlines() if ln.strip()]) if p.returncode == 0 else 0


class Stopper:
    """The watcher's stop: ``tick`` once per loop with the runs going now and the GPUs' readings."""

    def __init__(self, cfg: dict[str, Any], runs_dir: str, tell: Callable[[str, str, str], None]) -> None:
        self.command = str(cfg.get("stop_command") or "")
        self.when = [str(w) for w in cfg.get("stop_when") or []]
        notice = cfg.get("stop_notice_s")
        self.notice_s = float(notice) if isinstance(notice, (int, float)) else NOTICE_S
        self.timeout_s = float(cfg.get("stop_timeout_s") or TIMEOUT_S)
        self.threshold = float(cfg.get("idle_threshold") or 5.0)
        self.idle_s = next((float(w.split(":", 1)[1]) for w in self.when if w.startswith("idle:")), None)
        self.runs_dir, self.host, self.tell = runs_dir, str(cfg.get("host") or "?"), tell
        state = read_json(here(STOP_STATE))
        self.state: dict[str, Any] = state if isinstance(state, dict) else {}
        self.state.setdefault("fired", [])
        self.seen: set[str] = set()
        self.looked = time.time()  # runs that end after this are seen ending, however short
        self.idle_since: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def poll_s(self) -> float:
        """How soon the watcher looks again: each second while a stop is armed or running, else 5 s."""
        return 1.0 if self.proc is not None or self.state.get("armed") else 5.0

    def _save(self) -> None:
        self.state["fired"] = self.state["fired"][-50:]
        write_json(here(STOP_STATE), self.state)

    def _arm(self, trigger: str, key: str, why: str, now: float) -> None:
        if key in self.state["fired"] or self.state.get("armed"):
            return
        self.state["fired"].append(key)
        at = now + self.notice_s
        self.state["armed"] = {"trigger": trigger, "why": why, "at": at, "since": now}
        self._save()
        self.tell(
            "stop armed",
            trigger,
            f"{why}; `{self.command}` runs in {format_elapsed(self.notice_s)} "
            f"unless a run starts (cancel: pippa keep {self.host})",
        )

    def tick(self, now: float, going: list[str], utils: list[float] | None) -> None:
        if self.proc is not None:
            self._reap(now)
            return
        if (self.state.get("armed") or {}).get("ran"):  # a watcher before us started it: never again
            self._ended(now, "the watcher restarted while it ran; its end is not known")
            return
        ended = sorted((self.seen - set(going)) | set(ended_since(self.runs_dir, self.looked)))
        self.seen, self.looked = set(going), now
        for run_id in ended:
            cls = ended_as(os.path.join(self.runs_dir, run_id))
            if cls == "stalled" and "stalled" in self.when:
                self._arm("stalled", f"stalled:{run_id}", f"run {run_id} stalled with no retry left", now)
            if cls == "budget" and "budget" in self.when:
                self._arm("budget", f"budget:{run_id}", f"run {run_id} spent its budget", now)
        if "done" in self.when and ended and not going:
            self._arm("done", "done:" + ",".join(ended), f"the last run ({ended[-1]}) ended, none waits", now)
        self._idle(now, going, utils)
        armed = self.state.get("armed")
        if not armed:
            return
        cancel = here(STOP_CANCEL)
        with contextlib.suppress(OSError):
            if os.stat(cancel).st_mtime >= float(armed["since"]) - 1:
                os.unlink(cancel)
                self._disarm(f"cancelled (pippa keep {self.host})")
                return
        if going and armed["trigger"] in ("done", "idle"):
            self._disarm(f"a run started ({going[0]})")
            return
        if now < float(armed["at"]) or self._saving(now):
            return
        self._run(now)

    def _idle(self, now: float, going: list[str], utils: list[float] | None) -> None:
        if self.idle_s is None:
            return
        idle = bool(utils) and not going and all(u < self.threshold for u in utils or [])
        if not idle or attached_clients():
            self.idle_since = None
            return
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since >= self.idle_s:
            why = f"every GPU under {self.threshold:g}% for {format_elapsed(now - self.idle_since)}, no run"
            self._arm("idle", f"idle:{self.idle_since:.0f}", why, now)

    def _disarm(self, why: str) -> None:
        armed = self.state.pop("armed", None) or {}
        self._save()
        self.tell("stop cancelled", str(armed.get("trigger") or ""), why)

    def _saving(self, now: float) -> bool:
        try:
            names = os.listdir(self.runs_dir)
        except OSError:
            return False
        return any(saving(os.path.join(self.runs_dir, n), now) for n in names)

    def _run(self, now: float) -> None:
        log = open(here(STOP_LOG), "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                ["sh", "-c", self.command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=os.path.expanduser("~"),
            )
        except OSError as e:
            self._ended(now, f"could not start: {e}")
            return
        finally:
            log.close()
        self.state["armed"]["ran"] = now
        self._save()

    def _reap(self, now: float) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        ran = float((self.state.get("armed") or {}).get("ran") or now)
        if code is None and now - ran < self.timeout_s:
            return
        if code is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._ended(now, f"killed after {format_elapsed(self.timeout_s)} (it did not end)")
            return
        self._ended(now, f"exit {code}")

    def _ended(self, now: float, how: str) -> None:
        self.proc = None
        armed = self.state.pop("armed", None) or {}
        last = next((ln for ln in reversed(tail_lines(here(STOP_LOG), 4096)) if ln.strip()), "")
        self.state["last"] = {"trigger": armed.get("trigger"), "time": now, "how": how, "line": last[:300]}
        self._save()
        said = f"`{self.command}`: {how}" + (f"; last line: {last[:200]}" if last else "")
        self.tell("stop ran", str(armed.get("trigger") or ""), said)


def stopper_of(
    cfg: dict[str, Any], old: Stopper | None, tell: Callable[[str, str, str], None]
) -> Stopper | None:
    """The stop config.json asks for (None: no ``stop`` or no ``stop_when``); keeps ``old``'s runs."""
    if not cfg.get("stop_command") or not cfg.get("stop_when"):
        return None
    runs_dir = os.path.join(os.path.expanduser(str(cfg.get("remote_dir") or "~/pippa")), "runs")
    new = Stopper(cfg, runs_dir, tell)
    if old is not None:
        new.seen, new.proc, new.idle_since, new.looked = old.seen, old.proc, old.idle_since, old.looked
    return new
