"""Delivery: an event becomes a message (pippa_contract.alerts), redacted of every secret, and goes to
PIPPA_NOTIFY through Apprise in the host's training Python (``alerts send``, a child process of this
program run by that Python); every attempt is logged in deliveries.jsonl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from pippa_agent.alerts.files import here, load_config, secret_target, secret_values, tail_lines
from pippa_agent.zipapp import program_file
from pippa_contract.alerts import message
from pippa_contract.hostdirs import DELIVERIES

DELIVERIES_MAX_BYTES = 200_000
SEND_TIMEOUT_S = 30.0  # the whole delivery process; Apprise's own connect/read limits are 4 s each

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def log_delivery(event: dict[str, Any], ok: bool, error: str | None) -> None:
    """Append one attempt to deliveries.jsonl, first halving it when it is over DELIVERIES_MAX_BYTES.

    Runs' ends and the watcher log at once: trim and append happen under one lock, so no trim writes
    over another's temp file or drops a record appended between its read and its rename."""
    import fcntl

    path = here(DELIVERIES)
    rec = {
        "time": time.time(),
        "state": event.get("state"),
        "run_id": event.get("run_id"),
        "subject": event.get("subject"),
        "ok": ok,
        "error": error,
    }
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


def sender_argv(cfg: dict[str, Any]) -> list[str]:
    """The training Python running this file's ``send``: where Apprise is installed."""
    py = cfg.get("python")
    words = [str(w) for w in py] if isinstance(py, list) and py else [sys.executable]
    return [os.path.expanduser(words[0]), *words[1:], program_file() or "agent.pyz", "alerts", "send"]


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


def emit(event: dict[str, Any], timeout: float = SEND_TIMEOUT_S) -> dict[str, Any]:
    """Deliver one event when PIPPA_NOTIFY is set (else nothing is sent or logged); never raises.

    Title, body and error are redacted of every value of the secrets file: a failed run's reason is a
    line of its log, which may quote a token the job printed."""
    values = secret_values()
    target = secret_target(values)
    if target is None:
        return {"sent": False, "configured": False}
    from pippa_contract.secretprints import Redactor, load

    clean = Redactor(values, load()).line  # today's secrets and the prints of those pushed before
    try:
        title, body, kind = message(event)
        ok, error = deliver(clean(title), clean(body), kind, timeout)
    except Exception as e:  # a broken event must not break its caller (a run's end, the watcher)
        ok, error = False, f"{type(e).__name__}: {e}"
    error = clean(error) if error else error  # a delivery's traceback may quote the URL
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
