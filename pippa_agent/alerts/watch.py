"""The host's watcher (``alerts watch``, one per host user, under a lock) and the low-disk check. While
alerts are configured (config.json's ``fault_watch``) and a run is active: once per GPU fault it did not
start with (a new Xid in the kernel log, new uncorrectable ECC errors, a failed row remap:
pippa_agent.doctor.watch). With ``idle_alert``: once when every GPU idles with no pippa run, once when
busy again. It records the PATH it was started with, the host entry's ``env`` it applied and the
nvidia-smi that PATH finds (watch.json): ``watch-ensure`` (each ``pippa up``) replaces a watcher started
with another PATH or ``env`` (pippa_agent.alerts.watchenv), so a host whose login environment gained
nvidia-smi, or whose entry's env changed, is watched with it, and ``pippa hosts`` says whether the
watcher sees one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from pippa_agent.alerts.daily import check_daily
from pippa_agent.alerts.deliver import emit
from pippa_agent.alerts.events import host_event, run_event
from pippa_agent.alerts.files import here, load_config, read_json, read_text, secret_values, write_json
from pippa_agent.alerts.heartbeat import Heartbeat, heartbeat_of
from pippa_agent.alerts.stopper import Stopper, stopper_of
from pippa_agent.alerts.watchenv import differs, entry_env, environment, take_entry_env
from pippa_agent.zipapp import program_file
from pippa_contract import rundir as rd
from pippa_contract.alerts import DEFAULT_IDLE_THRESHOLD, format_elapsed
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR, WATCH_LOCK, WATCH_STATE
from pippa_contract.secrets import HEARTBEAT
from pippa_contract.sessions import IDENTITY_FORMAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DISK_MIN_FREE = 0.05  # alert when the run's file system has less than this fraction free


def free_fraction(path: str) -> float | None:
    try:
        st = os.statvfs(os.path.expanduser(path))
    except OSError:
        return None
    return st.f_bavail / st.f_blocks if st.f_blocks else None


def check_disk(path: str, state: dict[str, Any]) -> None:
    """Alert once when ``path``'s file system drops under DISK_MIN_FREE free, again after it recovers."""
    frac = free_fraction(path)
    if frac is None:
        return
    low = frac < DISK_MIN_FREE
    if low and not state.get("disk_low"):
        emit(host_event("disk low", path, f"{frac * 100:.1f}% free on the file system of {path}"))
    state["disk_low"] = low


# ---- the idle-GPU watcher ------------------------------------------------------------------------


def gpu_utilization() -> list[float] | None:
    """Each GPU's utilization in %, or None where nvidia-smi is missing or fails."""
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    out = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        try:
            out.append(float(line.strip()))
        except ValueError:
            continue
    return out or None


def active_run(remote_dir: str) -> str | None:
    """A pippa run under ``remote_dir`` whose job is going: no exit_code and its tmux session alive."""
    going = active_runs(remote_dir)
    return going[0] if going else None


def active_runs(remote_dir: str) -> list[str]:
    """The pippa runs under ``remote_dir`` whose job is going: no exit_code and its tmux session alive."""
    base = os.path.join(os.path.expanduser(remote_dir), "runs")
    candidates = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for entry in entries:
        if entry.is_dir() and not os.path.exists(os.path.join(entry.path, rd.EXIT_CODE)):
            ident = read_text(os.path.join(entry.path, rd.TMUX_SESSION), 128)
            if ident:
                candidates.append((ident, entry.name))
    if not candidates:
        return []
    try:
        p = subprocess.run(
            ["tmux", "list-sessions", "-F", IDENTITY_FORMAT],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    alive = set(p.stdout.decode("utf-8", "replace").split())
    return sorted(name for ident, name in candidates if ident in alive)


def health_interval(idle_s: float | None, fault_poll_s: float | None = None) -> float:
    """How often the GPU fault watch reads the kernel log (and, during a run, nvidia-smi -q -x): every
    fourth idle poll, at most every ``fault_poll_s`` (config.json; default 30 s)."""
    from pippa_agent.doctor.watch import POLL_S

    most = fault_poll_s if fault_poll_s and fault_poll_s > 0 else POLL_S
    return most if idle_s is None else min(most, 4 * poll_interval(idle_s))


def check_gpu_faults(health: Any, remote_dir: str, run: str | None) -> int:
    """Feed one observation to the fault watch (``doctor.watch.GpuHealthWatch``); alert each new fault
    as an event of the active run. nvidia-smi's full query only while a run is active (the baseline of
    the kernel log is kept meanwhile). Returns how many alerts were sent."""
    from pippa_agent.doctor import kernel
    from pippa_agent.doctor.watch import observe
    from pippa_contract.xids import boot_time

    if run is None:
        lines, _ = kernel.read_log()
        gpus = None
    else:
        lines, gpus = observe()
    faults = health.sample(lines, gpus, run, boot_time())
    for _subject, why in faults:
        run_dir = os.path.join(os.path.expanduser(remote_dir), "runs", str(run))
        emit(run_event(run_dir, state="gpu fault", reason=why))
    if health.found:
        record_faults(health.found, gpus or [], remote_dir)
        health.found = []
    return len(faults)


def record_faults(found: list[Any], gpus: list[Any], remote_dir: str) -> None:
    """The Xids the watch saw, as a result in the host's doctor history (the doctor's own ``xid`` checks),
    so the dashboard's badge, ``pippa doctor --history`` and ``--failover``'s choice of a healthy host
    see them at their next read, not at the next ``pippa doctor``. A write that fails is passed over: the
    alert went out, and the next ``pippa doctor`` reads the same kernel log."""
    from pippa_agent.doctor import gpu_checks, history
    from pippa_contract.doctor import result

    res = result(str(load_config().get("host") or ""), gpu_checks.xid_checks(gpus, found), {}, quick=True)
    res["source"] = "watcher"
    with contextlib.suppress(OSError):
        history.store(remote_dir, res)


def poll_interval(idle_s: float) -> float:
    """A tenth of the idle period, between 0.5 s and 60 s: the alert comes at most 10% (a minute) late,
    and a real nvidia-smi (tens of ms of CPU, more with many GPUs) costs well under 0.5% of a core."""
    return max(0.5, min(60.0, idle_s / 10.0))


class IdleWatch:
    """The state machine: idle since when, alerted or not. ``sample`` is fed one observation."""

    def __init__(self, idle_s: float, threshold: float) -> None:
        self.idle_s = idle_s
        self.threshold = threshold
        self.idle_since: float | None = None
        self.alerted = False

    def sample(self, now: float, utils: list[float] | None, run: str | None) -> str | None:
        """``"idle"`` when the alert is due, ``"busy"`` when an alerted idle period ends, else None.

        A sample with no reading (nvidia-smi failed once) and no run says nothing: it neither ends an
        idle period nor alerts again when the next reading is idle."""
        if not utils and run is None:
            return None
        idle = bool(utils) and run is None and all(u < self.threshold for u in utils or [])
        if idle:
            if self.idle_since is None:
                self.idle_since = now
            if not self.alerted and now - self.idle_since >= self.idle_s:
                self.alerted = True
                return "idle"
            return None
        was = self.alerted
        self.alerted = False
        self.idle_since = None
        return "busy" if was else None


def lock_file() -> int:
    os.makedirs(os.path.expanduser(ALERTS_DIR), mode=0o700, exist_ok=True)
    return os.open(here(WATCH_LOCK), os.O_RDWR | os.O_CREAT, 0o600)


def watcher_running() -> bool:
    """Whether a watcher holds the lock, probed with a shared lock that its exclusive one refuses.

    The probe lasts microseconds, and a watcher starting meanwhile retries its own lock (watch_main)."""
    import fcntl

    fd = lock_file()
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def is_watcher(pid: object) -> bool:
    """Whether ``pid`` is a live watcher process (watch.json may name a dead one: a watcher killed
    with SIGKILL leaves its file behind)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    # this program's (``agent-<sha>.pyz alerts watch``) or an earlier version's (``hostalerts.py watch``)
    return b"watch" in args and any(a.endswith((b".pyz", b"hostalerts.py")) for a in args)


def tell_host(state: str, subject: str, why: str) -> None:
    """An alert about the host (the stop command's: armed, cancelled, ran), with what to do next."""
    event = host_event(state, subject or "host", why)
    if state == "stop armed":
        event["look"] = f"pippa keep {event['host']}  (cancels the stop)"
    emit(event)


def watch_main() -> int:
    """``watch``: until stopped (or config.json asks for neither watch), alert each new GPU fault during a
    run and, with ``idle_alert``, once when the GPUs idle and once when busy again."""
    import fcntl

    fd = lock_file()
    deadline = time.monotonic() + 1.0  # a probe (watcher_running) may hold the lock shared for a moment
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() >= deadline:
                return 0  # another watcher of this user holds the lock: one per host user
            time.sleep(0.02)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    started = time.time()
    entry = take_entry_env(load_config())  # the host entry's env (pippa up), for us and what we run
    write_json(
        here(WATCH_STATE), {"pid": os.getpid(), "started": started, **environment(entry)}
    )  # before the first sample
    cfg_mtime = None
    watch = IdleWatch(1200.0, DEFAULT_IDLE_THRESHOLD)
    idle_on, faults_on, fault_poll = False, False, None
    beat: Heartbeat | None = None
    stopper: Stopper | None = None
    from pippa_agent.doctor.watch import GpuHealthWatch

    health, next_health = GpuHealthWatch(), 0.0
    disk: dict[str, Any] = {}
    cfg: dict[str, Any] = {}
    while not stopping:
        try:
            m = os.stat(here(ALERTS_CONFIG)).st_mtime
        except OSError:
            m = None
        if m != cfg_mtime:
            cfg_mtime, cfg = m, load_config()
            idle_on, faults_on = bool(cfg.get("idle_alert_s")), bool(cfg.get("fault_watch"))
            beat = heartbeat_of(cfg, secret_values().get(HEARTBEAT), beat)
            stopper = stopper_of(cfg, stopper, tell_host)
            if not (idle_on or faults_on or beat or stopper or cfg.get("daily_budget")):
                break  # alerts, idle_alert and the heartbeat were removed: `pippa up` stops us too
            poll = cfg.get("fault_poll_s")
            fault_poll = float(poll) if isinstance(poll, (int, float)) else None
            watch.idle_s = float(cfg["idle_alert_s"]) if idle_on else 1200.0
            watch.threshold = float(cfg.get("idle_threshold", DEFAULT_IDLE_THRESHOLD))
            next_health = 0.0
        now = time.time()
        utils = gpu_utilization() if idle_on or (stopper is not None and stopper.idle_s) else None
        going = active_runs(str(cfg.get("remote_dir") or "~/pippa"))
        run = going[0] if going else None
        if beat is not None:
            beat.tick(now, going)
        if cfg.get("daily_budget"):
            check_daily(cfg, going, now, tell_host)
        if stopper is not None:
            stopper.tick(now, going, utils)
        due = watch.sample(now, utils, run) if idle_on else None
        if due == "idle":
            idle_for = now - (watch.idle_since or now)
            why = f"every GPU under {watch.threshold:g}% for {format_elapsed(idle_for)}, no pippa run active"
            emit(host_event("idle", "GPUs", why, idle_for))
        elif due == "busy":
            emit(host_event("busy", "GPUs", "the idle period ended (GPUs in use or a run started)"))
        check_disk(str(cfg.get("remote_dir") or "~"), disk)
        health_every = health_interval(watch.idle_s if idle_on else None, fault_poll)
        if faults_on and now >= next_health:
            check_gpu_faults(health, str(cfg.get("remote_dir") or "~/pippa"), run)
            next_health = now + health_every
        state = {
            "pid": os.getpid(),
            "started": started,
            "sample_time": now,
            "utilization": utils,
            "active_run": run,
            "idle_since": watch.idle_since,
            "alerted": watch.alerted,
            **environment(entry),
        }
        write_json(here(WATCH_STATE), state)
        wait = poll_interval(watch.idle_s) if idle_on else health_every
        wait = min(wait, beat.every_s) if beat is not None else wait
        wait = min(wait, stopper.poll_s()) if stopper is not None else wait
        deadline = time.time() + wait
        while not stopping and time.time() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.time())))
    with contextlib.suppress(OSError):
        os.unlink(here(WATCH_STATE))
    return 0


def watch_ensure() -> dict[str, Any]:
    """Start the watcher unless one runs with this process's PATH and the host entry's ``env``
    (idempotent); its pid. One started with another (a login environment or an entry's env changed
    since, an earlier version's) is stopped first (``watchenv.differs``)."""
    if watcher_running() and differs(read_json(here(WATCH_STATE)), load_config()):
        watch_stop()
    if not watcher_running():
        program = program_file()
        if program is None:
            return {"watcher": None, "error": "not run from the host program"}
        subprocess.Popen(
            [sys.executable, "-S", "-I", program, "alerts", "watch"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env={**os.environ, **entry_env(load_config())},  # the host entry's env, as a run's cmd.sh has it
        )
    deadline = time.time() + 10
    while time.time() < deadline:
        st = read_json(here(WATCH_STATE))
        pid = st.get("pid") if isinstance(st, dict) else None
        if is_watcher(pid) and watcher_running():
            return {"watcher": pid}
        time.sleep(0.05)
    return {"watcher": None, "error": "the watcher did not start within 10s"}


def watch_stop() -> dict[str, Any]:
    """Stop this user's watcher (it alerts nothing on the way out)."""
    st = read_json(here(WATCH_STATE))
    pid = st.get("pid") if isinstance(st, dict) else None
    if not watcher_running():
        return {"stopped": None}
    if isinstance(pid, int):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 10
    while time.time() < deadline and watcher_running():
        time.sleep(0.05)
    return {"stopped": pid if not watcher_running() else None}
