"""A dead-man's switch: the host's watcher pings ``PIPPA_HEARTBEAT`` (a URL in the 0600 secrets file,
pushed by ``pippa up`` like PIPPA_NOTIFY, never in argv, a log or a message), following healthchecks.io's
conventions, which Uptime Kuma push monitors and BetterStack heartbeats accept too:

- ``<url>/start`` when a run starts (the watcher first sees it going);
- ``<url>`` every ``heartbeat_every`` seconds (config.json; default 60) while a run makes progress: a new
  metrics line within its stall window (the run's ``--stall-timeout`` when it has one, else
  ``pippa_contract.stall.FLOOR_S``); before its first line (start-up, or a ``--cmd`` run), new output.
  A stalled loop stops pinging although the host is up; a dead host says nothing, which is the point:
  the outside service raises the alarm when the pings stop;
- ``<url>/fail`` with a one-line body when a run fails or is lost, ``<url>`` when it ends otherwise;
- with ``heartbeat = "always"``: ``<url>`` every period while no run is going either.

Pings leave from one sender thread, each with a bounded timeout (``TIMEOUT_S``), so the watcher's own
loop never waits on the network and the trainer is another process altogether. An unreachable URL is one
line in ``heartbeat.log`` beside config.json (again only after a ping got through); nothing is retried.

Python >= 3.8, standard library and pippa_contract only.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time

from pippa_agent.alerts.files import ended_since, here, read_text
from pippa_contract import rundir as rd
from pippa_contract.stall import FLOOR_S

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

HEARTBEAT_LOG = "heartbeat.log"
EVERY_S = 60.0
TIMEOUT_S = 10.0  # one ping's limit: a hung service costs the sender thread this, never the loop
QUEUE_MAX = 64  # pings waiting for the sender; more are dropped (the service is down anyway)


def post(url: str, body: str = "") -> None:
    """One ping (POST, which healthchecks.io, Uptime Kuma and BetterStack accept); raises on failure."""
    import urllib.request

    req = urllib.request.Request(
        url, data=body.encode("utf-8", "replace"), method="POST", headers={"User-Agent": "pippa-heartbeat"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        resp.read(1024)


class Sender:
    """The one thread that sends pings, in order; a failure is logged once until a ping gets through."""

    def __init__(self, url: str, log_path: str, send: Callable[[str, str], None] = post) -> None:
        self.url = url.rstrip("/")
        self.log_path = log_path
        self.send = send
        self.failing = False
        self.sent = 0
        self.pending: queue.Queue[tuple[str, str]] = queue.Queue(QUEUE_MAX)
        threading.Thread(target=self._loop, daemon=True, name="heartbeat").start()

    def ping(self, suffix: str = "", body: str = "") -> None:
        with contextlib.suppress(queue.Full):  # the service is down anyway: drop it
            self.pending.put_nowait((suffix, body))

    def _loop(self) -> None:
        while True:
            suffix, body = self.pending.get()
            try:
                self.send(self.url + suffix, body)
            except Exception as e:  # any failure of the service or the network: the run goes on
                if not self.failing:
                    self.failing = True
                    self._log(f"heartbeat ping failed ({type(e).__name__}: {e}); the runs go on")
                continue
            self.failing = False
            self.sent += 1

    def _log(self, line: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        for secret in (self.url, parts.path, parts.query):  # the token lives in the path (or the query)
            if len(secret) >= 4:
                line = line.replace(secret, "***")
        line = line.replace("\n", " ")
        try:
            with open(self.log_path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
        except OSError:
            pass


def stall_window(run_dir: str) -> float:
    """Seconds without a new metrics line after which a run stops counting as making progress."""
    try:
        with open(os.path.join(run_dir, rd.RUN_JSON), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        meta = {}
    restart = meta.get("restart") if isinstance(meta, dict) else None
    fixed = restart.get("stall_timeout_s") if isinstance(restart, dict) else None
    if isinstance(fixed, (int, float)) and not isinstance(fixed, bool) and fixed > 0:
        return float(fixed)
    return FLOOR_S


def progressing(run_dir: str, now: float) -> bool:
    """A new metrics line within the run's stall window; before the first one (start-up, or a ``--cmd``
    run, which writes none), new output, as the supervisor's stall watch reads a command's progress."""
    for name in (rd.METRICS, rd.OUTPUT_LOG):
        try:
            newest = os.path.getmtime(os.path.join(run_dir, name))
        except OSError:
            continue
        return now - newest <= stall_window(run_dir)
    return True


def ending(run_dir: str, run_id: str, host: str) -> tuple[str, str]:
    """How a run that stopped going ended, as (suffix, body): ``/fail`` and one line when it failed or
    was lost, ``""`` otherwise (finished, stopped by the user, moved on)."""
    code = read_text(os.path.join(run_dir, rd.EXIT_CODE), 32)
    stopped = os.path.exists(os.path.join(run_dir, rd.STOP_REQUESTED))
    moved = os.path.exists(os.path.join(run_dir, rd.MOVED_TO))
    if stopped or moved or code == "0":
        return "", ""
    what = f"failed (exit {code})" if code else "lost (its session ended with no exit code)"
    return "/fail", f"{host}: run {run_id} {what}"


class Heartbeat:
    """The watcher's heartbeat: ``tick`` is fed the runs going now, once per watcher loop."""

    def __init__(self, sender: Sender, every_s: float, always: bool, runs_dir: str, host: str) -> None:
        self.sender, self.every_s, self.always = sender, every_s, always
        self.runs_dir, self.host = runs_dir, host
        self.going: set[str] = set()
        self.looked = time.time()  # runs that end after this are told, however short
        self.next_at = 0.0

    def tick(self, now: float, active: list[str]) -> None:
        for run_id in active:
            if run_id not in self.going:
                self.going.add(run_id)
                self.sender.ping("/start")
        ended = (self.going - set(active)) | set(ended_since(self.runs_dir, self.looked))
        self.looked = now
        for run_id in sorted(ended):
            self.going.discard(run_id)
            suffix, body = ending(os.path.join(self.runs_dir, run_id), run_id, self.host)
            self.sender.ping(suffix, body)
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        moving = any(progressing(os.path.join(self.runs_dir, r), now) for r in active)
        if moving or (self.always and not active):
            self.sender.ping()


def heartbeat_of(cfg: dict[str, Any], url: str | None, old: Heartbeat | None = None) -> Heartbeat | None:
    """The heartbeat config.json and the secrets file ask for (None: PIPPA_HEARTBEAT not set); ``old``:
    the one before a change of config.json, whose runs (already told ``/start``) and sender it keeps."""
    if not url:
        return None
    every = cfg.get("heartbeat_every_s")
    every_s = float(every) if isinstance(every, (int, float)) and every > 0 else EVERY_S
    runs_dir = os.path.join(os.path.expanduser(str(cfg.get("remote_dir") or "~/pippa")), "runs")
    same = old is not None and old.sender.url == url.rstrip("/")
    sender = old.sender if same and old is not None else Sender(url, here(HEARTBEAT_LOG))
    beat = Heartbeat(sender, every_s, cfg.get("heartbeat") == "always", runs_dir, str(cfg.get("host") or ""))
    if old is not None:
        beat.going, beat.looked = old.going, old.looked
    return beat
