"""pippa's alerts on a host: one standard-library program (python3 >= 3.8) that `pippa up` copies to
``~/.config/pippa/alerts/hostalerts.py`` and that everything on the host calls to tell the team.

Why a program of its own: the host agent stays standard-library only and is not a file on the host,
while delivery needs Apprise. So this program builds the event and the message with the standard
library under the host's ``python3``, and only the delivery itself (``hostalerts.py send``) runs under
the host's training Python, where `pippa up` installs Apprise with the rest. The target, the secret
``PIPPA_NOTIFY`` (one or more Apprise URLs), is read by that delivery process from the 0600 secrets
file: it never travels in argv, the environment of a job, a log or a message.

The one entry point for events::

    python3 -S ~/.config/pippa/alerts/hostalerts.py event --run-dir DIR [--state S] [--reason LINE] [--detach]

(or ``emit(run_event(...))`` from Python). ``--detach`` returns at once: delivery never slows or fails
a run. Every attempt is recorded in ``deliveries.jsonl`` beside this file (``pippa hosts`` shows the
last failure). The idle-GPU watcher (``watch``), its control (``watch-ensure``, ``watch-stop``),
``status`` and ``test`` are subcommands too. The laptop imports the pure functions (cost, duration
parsing, message format) from the same module, so both sides agree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ALERTS_DIR = "~/.config/pippa/alerts"
PROGRAM = ALERTS_DIR + "/hostalerts.py"
SECRETS_PATH = "~/.config/pippa/secrets.env"
TARGET = "PIPPA_NOTIFY"
CONFIG = "config.json"
DELIVERIES = "deliveries.jsonl"
WATCH_STATE = "watch.json"
WATCH_LOCK = "watch.lock"
DELIVERIES_MAX_BYTES = 200_000
SEND_TIMEOUT_S = 30.0  # the whole delivery process; Apprise's own connect/read limits are 4 s each
DISK_MIN_FREE = 0.05  # alert when the run's file system has less than this fraction free
DEFAULT_IDLE_THRESHOLD = 5.0  # % utilization under which a GPU counts as idle
_ERROR_LINE = re.compile(r"(Error|Exception|Traceback|error:|FAILED|Killed|[Ff]atal)")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?$")
_ADDRESS = re.compile(r"[0-9.]{1,15}")  # an IPv4 address or a port: parts of a URL that are no secret
_GPU_IDS = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


# ---- pure functions shared with the laptop -------------------------------------------------------


def parse_duration(text: str) -> float:
    """``"20m"``, ``"90s"``, ``"1h30m"``, ``"45"`` (seconds) -> seconds; ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"a duration like 20m, 90s or 1h30m, not {text!r}")
    h, mins, s = m.groups()
    return int(h or 0) * 3600.0 + int(mins or 0) * 60.0 + float(s or 0)


def gpu_ids_count(spec: str) -> int | None:
    """How many GPUs ``launch.gpus`` names (``"0-6"``, ``"0,2"``); None when it is not such a list."""
    spec = spec.strip().strip("\"'")
    if not _GPU_IDS.fullmatch(spec):
        return None
    n = 0
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) - int(lo) + 1) if hi.strip() else 1
    return n if n > 0 else None


def run_gpus(command: str) -> int | None:
    """The GPUs a run asked for (its ``--set launch.gpus=...``, i.e. ``pippa run --gpus``); None: all."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    found = None
    for i, word in enumerate(words):
        item = words[i + 1] if word == "--set" and i + 1 < len(words) else ""
        if item.startswith("launch.gpus="):
            found = gpu_ids_count(item.split("=", 1)[1])
    return found


def cost_so_far(
    elapsed_s: float | None,
    cost_per_hour: float | None,
    cost_per_gpu_hour: float | None,
    run_gpus: int | None,
    host_gpus: int | None,
) -> float | None:
    """elapsed x the host's rate x the run's share of the host's GPUs (all of them without ``--gpus``).

    None where the host has no rate, or where the share needs a GPU count nobody knows: never a
    made-up zero."""
    if elapsed_s is None:
        return None
    hours = max(0.0, elapsed_s) / 3600.0
    if cost_per_gpu_hour is not None:
        n = run_gpus if run_gpus is not None else host_gpus
        return None if n is None else hours * cost_per_gpu_hour * n
    if cost_per_hour is not None:
        if run_gpus is None:
            return hours * cost_per_hour
        if not host_gpus:
            return None
        return hours * cost_per_hour * min(1.0, run_gpus / host_gpus)
    return None


def format_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s"


def message(event: dict) -> tuple[str, str, str]:
    """(title, body, Apprise notify type) of an event: one ``field: value`` line per known fact."""
    state = str(event.get("state") or "event")
    host = str(event.get("host") or "?")
    what = event.get("run_id") or event.get("subject") or ""
    title = f"pippa: {state} {what} on {host}" if what else f"pippa: {state} on {host}"
    lines = [f"host: {host}"]
    if event.get("run_id"):
        lines.append(f"run: {event['run_id']}")
    if event.get("recipe"):
        lines.append(f"recipe: {event['recipe']}")
    lines.append(f"state: {state}")
    if event.get("step") is not None:
        total = event.get("total_steps")
        lines.append(f"step: {event['step']}/{total if total is not None else '?'}")
    if event.get("reason"):
        lines.append(f"reason: {event['reason']}")
    if event.get("elapsed_s") is not None:
        lines.append(f"elapsed: {format_elapsed(event['elapsed_s'])}")
    if event.get("cost") is not None:
        lines.append(f"cost so far: {event['cost']:.2f}")
    if event.get("wandb"):
        lines.append(f"W&B: {event['wandb']}")
    if event.get("look"):
        lines.append(f"look: {event['look']}")
    kind = {"finished": "success", "recovered": "success", "busy": "info"}.get(state, "failure")
    if state in ("test", "idle"):
        kind = "info" if state == "test" else "warning"
    return title, "\n".join(lines), kind


# ---- files on the host ---------------------------------------------------------------------------


def here(name: str) -> str:
    return os.path.join(os.path.expanduser(ALERTS_DIR), name)


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def write_json(path: str, data: object) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(json.dumps(data))
    os.replace(tmp, path)


def load_config() -> dict:
    cfg = read_json(here(CONFIG))
    return cfg if isinstance(cfg, dict) else {}


def secret_values() -> dict[str, str]:
    """Every ``KEY='value'`` line of the 0600 secrets file (written by `pippa up`), as a dict."""
    try:
        with open(os.path.expanduser(SECRETS_PATH)) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip():
            try:
                words = shlex.split(value)
            except ValueError:
                continue
            out[key.strip()] = words[0] if words else ""
    return out


def secret_target(values: dict[str, str] | None = None) -> str | None:
    """PIPPA_NOTIFY (one or more Apprise URLs) from the secrets file; None when unset or blank."""
    target = (secret_values() if values is None else values).get(TARGET)
    return target if target and target.strip() else None


def read_text(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def tail_lines(path: str, nbytes: int = 65536) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    return lines[1:-1] if size > nbytes else lines[:-1]


def first_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.readline(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def error_line(log: str) -> str | None:
    """The reason ``pippa ps`` shows: the log's last line that reads like an error, else its last."""
    lines = [ln.strip() for ln in tail_lines(log) if ln.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else None


# ---- events --------------------------------------------------------------------------------------


def run_event(run_dir: str, state: str | None = None, reason: str | None = None) -> dict:
    """Everything a message says about one run, from its directory (docs/CONTRACTS.md) and config.json.

    ``state`` defaults to what the run's files say (finished on exit 0, else failed); issue-specific
    states (stalled, retried, ...) are passed by their caller with their own reason line."""
    cfg = load_config()
    run_dir = os.path.abspath(os.path.expanduser(run_dir))
    meta = read_json(os.path.join(run_dir, "run.json"))
    meta = meta if isinstance(meta, dict) else {}
    run_id = os.path.basename(run_dir.rstrip("/"))
    exit_text = read_text(os.path.join(run_dir, "exit_code"), 16)
    if state is None:
        if exit_text is None:
            state = "running"
        elif read_text(os.path.join(run_dir, "stop_requested"), 32) is not None:
            state = "stopped"
        else:
            state = "finished" if exit_text == "0" else "failed"
    step = end = None
    for line in tail_lines(os.path.join(run_dir, "metrics.jsonl")):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "step":
            step = rec.get("step")
        elif isinstance(rec, dict) and rec.get("type") == "end":
            end = rec
    try:
        first = json.loads(first_line(os.path.join(run_dir, "metrics.jsonl")) or "null")
    except ValueError:
        first = None
    header: dict = first if isinstance(first, dict) and first.get("type") == "header" else {}
    total = None
    config = header.get("config")
    train = config.get("train") if isinstance(config, dict) else None
    if isinstance(train, dict) and isinstance(train.get("max_steps"), int) and train["max_steps"] > 0:
        total = train["max_steps"]
    if isinstance(end, dict) and isinstance(end.get("step"), int):
        step = end["step"]
    if reason is None and state == "failed":
        reason = (end or {}).get("error") or error_line(os.path.join(run_dir, "output.log"))
    started = read_text(os.path.join(run_dir, "started"), 32)
    t0 = float(started) if started and re.match(r"^\d+(\.\d+)?$", started) else meta.get("started")
    t1 = None
    try:
        t1 = os.stat(os.path.join(run_dir, "exit_code")).st_mtime if exit_text is not None else time.time()
    except OSError:
        t1 = time.time()
    elapsed = max(0.0, t1 - float(t0)) if isinstance(t0, (int, float)) else None
    command = str(meta.get("command") or "")
    per_host, per_gpu = cfg.get("cost_per_hour"), cfg.get("cost_per_gpu_hour")
    wandb = header.get("wandb")
    wandb = wandb if isinstance(wandb, dict) else {}
    host = str(meta.get("host") or cfg.get("host") or "?")
    return {
        "state": state,
        "host": host,
        "run_id": run_id,
        "recipe": meta.get("recipe") or (command[:80] if command else None),
        "step": step,
        "total_steps": total,
        "reason": reason,
        "elapsed_s": elapsed,
        "cost": cost_so_far(elapsed, per_host, per_gpu, run_gpus(command), cfg.get("gpus")),
        "wandb": wandb.get("url"),
        "look": f"pippa logs {run_id} --host {host}",
        "time": time.time(),
    }


def host_event(state: str, subject: str, reason: str, elapsed_s: float | None = None) -> dict:
    """An event about the host itself (GPUs idle or busy again, low disk)."""
    cfg = load_config()
    host = str(cfg.get("host") or "?")
    gpus = cfg.get("gpus")
    cost = None
    if elapsed_s is not None and state == "idle":
        cost = cost_so_far(elapsed_s, cfg.get("cost_per_hour"), cfg.get("cost_per_gpu_hour"), None, gpus)
    return {"state": state, "host": host, "subject": subject, "reason": reason, "elapsed_s": elapsed_s,
            "cost": cost, "look": "pippa hosts", "time": time.time()}  # fmt: skip


def log_delivery(event: dict, ok: bool, error: str | None) -> None:
    """Append one attempt to deliveries.jsonl, first halving it when it is over DELIVERIES_MAX_BYTES.

    Runs' ends and the watcher log at once: trim and append happen under one lock, so no trim writes
    over another's temp file or drops a record appended between its read and its rename."""
    import fcntl

    path = here(DELIVERIES)
    rec = {"time": time.time(), "state": event.get("state"), "run_id": event.get("run_id"),
           "subject": event.get("subject"), "ok": ok, "error": error}  # fmt: skip
    try:
        lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path) and os.path.getsize(path) > DELIVERIES_MAX_BYTES:
            keep = tail_lines(path, DELIVERIES_MAX_BYTES // 2)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write("".join(line + "\n" for line in keep))
            os.replace(tmp, path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "a") as f:
            f.write(json.dumps(rec) + "\n")
    except OSError:
        pass
    finally:
        os.close(lock)


def sender_argv(cfg: dict) -> list[str]:
    """The training Python running this file's ``send``: where Apprise is installed."""
    py = cfg.get("python")
    words = [str(w) for w in py] if isinstance(py, list) and py else [sys.executable]
    return [os.path.expanduser(words[0]), *words[1:], os.path.abspath(__file__), "send"]


def deliver(title: str, body: str, kind: str, timeout: float = SEND_TIMEOUT_S) -> tuple[bool, str | None]:
    """Send one message to PIPPA_NOTIFY through Apprise in the training Python; (ok, error line)."""
    cfg = load_config()
    payload = json.dumps({"title": title, "body": body, "type": kind}).encode()
    cwd = cfg.get("remote_dir")
    cwd = os.path.expanduser(cwd) if isinstance(cwd, str) and os.path.isdir(os.path.expanduser(cwd)) else None
    try:
        p = subprocess.run(sender_argv(cfg), input=payload, capture_output=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return False, f"no answer from the delivery within {timeout:.0f}s"
    except OSError as e:
        return False, f"cannot start {sender_argv(cfg)[0]}: {e}"
    try:
        answer = json.loads(p.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        err = [ln for ln in p.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        return False, (err[-1] if err else f"delivery exited {p.returncode}")[:300]
    return bool(answer.get("ok")), answer.get("error")


def emit(event: dict, timeout: float = SEND_TIMEOUT_S) -> dict:
    """Deliver one event when PIPPA_NOTIFY is set (else nothing is sent or logged); never raises.

    Title, body and error are redacted of every value of the secrets file: a failed run's reason is a
    line of its log, which may quote a token the job printed."""
    values = secret_values()
    target = secret_target(values)
    if target is None:
        return {"sent": False, "configured": False}
    try:
        title, body, kind = message(event)
        ok, error = deliver(redact_secrets(title, values), redact_secrets(body, values), kind, timeout)
    except Exception as e:  # a broken event must not break its caller (a run's end, the watcher)
        ok, error = False, f"{type(e).__name__}: {e}"
    error = redact_secrets(error, values) if error else error  # a delivery's traceback may quote the URL
    log_delivery(event, ok, error)
    return {"sent": ok, "configured": True, "error": error}


def detach() -> bool:
    """Fork twice and leave the caller's session (a run's tmux pane may close at once); True in
    the process that goes on, False in the caller, which returns."""
    if os.fork() != 0:
        return False
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    fd = os.open(os.devnull, os.O_RDWR)
    for n in (0, 1, 2):
        os.dup2(fd, n)
    return True


# ---- delivery through Apprise (runs under the training Python) ------------------------------------


def redact(text: str, target: str) -> str:
    """Take every part of the Apprise URLs out of a line (tokens live in hosts, paths and queries).

    Bare addresses and ports (digits and dots, IPv4 length at most) stay: they are no secret, and
    taking them out would mangle the steps, times and costs a message carries."""
    for url in sorted(re.split(r"[\s,]+", target), key=len, reverse=True):
        if url:
            text = text.replace(url, "***")
    for part in sorted(set(re.split(r"[^A-Za-z0-9_.~%+-]+", target)), key=len, reverse=True):
        if len(part) >= 4 and part not in ("json", "form", "http", "https") and not _ADDRESS.fullmatch(part):
            text = text.replace(part, "***")
    return text


def redact_secrets(text: str, values: dict[str, str]) -> str:
    """``text`` without PIPPA_NOTIFY's URLs and their parts (``redact``) or any other secret's value."""
    for key, value in sorted(values.items(), key=lambda kv: len(kv[1]), reverse=True):
        if key == TARGET:
            text = redact(text, value)
        elif len(value.strip()) >= 4:
            text = text.replace(value, "***")
    return text


def send_main() -> int:
    """``send``: one message from stdin to PIPPA_NOTIFY; prints ``{"ok", "error"}`` (error redacted)."""
    req = json.loads(sys.stdin.read())
    target = secret_target()
    if target is None:
        print(json.dumps({"ok": False, "error": "PIPPA_NOTIFY is not set on this host (pippa up)"}))
        return 1
    try:
        import logging

        import apprise
    except ImportError:
        why = f"Apprise is not installed in {sys.executable} (pippa up installs it)"
        print(json.dumps({"ok": False, "error": why}))
        return 1
    notifier = apprise.Apprise()
    if not notifier.add(target):
        print(json.dumps({"ok": False, "error": "PIPPA_NOTIFY holds no Apprise URL it understands"}))
        return 1
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:
        ok = bool(notifier.notify(body=req["body"], title=req["title"], notify_type=req.get("type", "info")))
    lines = [ln for ln in logs.getvalue().splitlines() if ln.strip()]
    error = None if ok else redact(lines[-1] if lines else "the service refused the message", target)[:300]
    print(json.dumps({"ok": ok, "error": error}))
    return 0 if ok else 1


# ---- disk ----------------------------------------------------------------------------------------


def free_fraction(path: str) -> float | None:
    try:
        st = os.statvfs(os.path.expanduser(path))
    except OSError:
        return None
    return st.f_bavail / st.f_blocks if st.f_blocks else None


def check_disk(path: str, state: dict) -> None:
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
        p = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=20)  # fmt: skip
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
    base = os.path.join(os.path.expanduser(remote_dir), "runs")
    candidates = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return None
    for entry in entries:
        if entry.is_dir() and not os.path.exists(os.path.join(entry.path, "exit_code")):
            ident = read_text(os.path.join(entry.path, "tmux_session"), 128)
            if ident:
                candidates.append((ident, entry.name))
    if not candidates:
        return None
    try:
        p = subprocess.run(["tmux", "list-sessions", "-F", "#{session_id}@#{session_created}"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    alive = set(p.stdout.decode("utf-8", "replace").split())
    return next((name for ident, name in candidates if ident in alive), None)


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
    return b"watch" in args and any(a.endswith(b"hostalerts.py") for a in args)


def watch_main() -> int:
    """``watch``: sample the GPUs until stopped; alert once when idle, once when busy again."""
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
    write_json(here(WATCH_STATE), {"pid": os.getpid(), "started": started})  # before the first, slow sample
    cfg_mtime = None
    watch = IdleWatch(1200.0, DEFAULT_IDLE_THRESHOLD)
    disk: dict[str, Any] = {}
    cfg: dict[str, Any] = {}
    while not stopping:
        try:
            m = os.stat(here(CONFIG)).st_mtime
        except OSError:
            m = None
        if m != cfg_mtime:
            cfg_mtime, cfg = m, load_config()
            if not cfg.get("idle_alert_s"):
                break  # the setting was removed: `pippa up` stops us too, this is the belt
            watch.idle_s = float(cfg["idle_alert_s"])
            watch.threshold = float(cfg.get("idle_threshold", DEFAULT_IDLE_THRESHOLD))
        now = time.time()
        utils = gpu_utilization()
        run = active_run(str(cfg.get("remote_dir") or "~/pippa"))
        due = watch.sample(now, utils, run)
        if due == "idle":
            idle_for = now - (watch.idle_since or now)
            why = f"every GPU under {watch.threshold:g}% for {format_elapsed(idle_for)}, no pippa run active"
            emit(host_event("idle", "GPUs", why, idle_for))
        elif due == "busy":
            emit(host_event("busy", "GPUs", "the idle period ended (GPUs in use or a run started)"))
        check_disk(str(cfg.get("remote_dir") or "~"), disk)
        state = {"pid": os.getpid(), "started": started, "sample_time": now, "utilization": utils,
                 "active_run": run, "idle_since": watch.idle_since, "alerted": watch.alerted}  # fmt: skip
        write_json(here(WATCH_STATE), state)
        deadline = time.time() + poll_interval(watch.idle_s)
        while not stopping and time.time() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.time())))
    with contextlib.suppress(OSError):
        os.unlink(here(WATCH_STATE))
    return 0


def watch_ensure() -> dict:
    """Start the watcher unless one runs (idempotent); its pid."""
    if not watcher_running():
        subprocess.Popen([sys.executable, "-S", os.path.abspath(__file__), "watch"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         close_fds=True, cwd="/")  # fmt: skip
    deadline = time.time() + 10
    while time.time() < deadline:
        st = read_json(here(WATCH_STATE))
        pid = st.get("pid") if isinstance(st, dict) else None
        if is_watcher(pid) and watcher_running():
            return {"watcher": pid}
        time.sleep(0.05)
    return {"watcher": None, "error": "the watcher did not start within 10s"}


def watch_stop() -> dict:
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


def status() -> dict:
    """What `pippa hosts` shows: alerts configured (never the target), watcher, idle time, failures."""
    cfg = load_config()
    last_failure = None
    failures = 0
    for line in tail_lines(here(DELIVERIES)):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and not rec.get("ok"):
            failures += 1
            last_failure = rec
    running = watcher_running()
    st = read_json(here(WATCH_STATE)) if running else None
    st = st if isinstance(st, dict) else {}
    now = time.time()
    idle_since = st.get("idle_since")
    return {
        "configured": secret_target() is not None,
        "watcher": st.get("pid") if running else None,
        "idle_alert_s": cfg.get("idle_alert_s"),
        "idle_s": now - idle_since if isinstance(idle_since, (int, float)) else None,
        "utilization": st.get("utilization"),
        "failures": failures,
        "last_failure": last_failure,
        "cost_per_hour": cfg.get("cost_per_hour"),
        "cost_per_gpu_hour": cfg.get("cost_per_gpu_hour"),
        "gpus": cfg.get("gpus"),
    }


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="hostalerts.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("event", help="tell PIPPA_NOTIFY about a run")
    ev.add_argument("--run-dir", required=True)
    ev.add_argument("--state", default=None)
    ev.add_argument("--reason", default=None)
    ev.add_argument("--detach", action="store_true", help="return at once; deliver in the background")
    for name in ("send", "test", "watch", "watch-ensure", "watch-stop", "status"):
        sub.add_parser(name)
    args = ap.parse_args(argv)
    if args.cmd == "send":
        return send_main()
    if args.cmd == "event":
        if args.detach and not detach():
            return 0
        event = run_event(args.run_dir, args.state, args.reason)
        if event["state"] in ("running", "stopped") and args.state is None:
            return 0  # a stop is the user's own doing; nothing to tell
        check_disk(os.path.dirname(os.path.abspath(os.path.expanduser(args.run_dir))), {})
        result = emit(event)
        if not args.detach:
            print(json.dumps(result))
        return 0
    if args.cmd == "test":
        if secret_target() is None:
            print(json.dumps({"sent": False, "configured": False, "error": "PIPPA_NOTIFY is not set"}))
            return 1
        result = emit(host_event("test", "", "a test message from pippa notify-test"))
        print(json.dumps(result))
        return 0 if result.get("sent") else 1
    handlers = {"watch": watch_main, "watch-ensure": watch_ensure, "watch-stop": watch_stop, "status": status}
    out = handlers[args.cmd]()
    if isinstance(out, dict):
        print(json.dumps(out))
        return 0
    return out if isinstance(out, int) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
