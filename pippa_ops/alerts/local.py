"""`pippa wait --notify` and `run --notify` on the laptop: besides the bell, the line and the desktop
notification (pippa_ops.notify), the same words go to PIPPA_NOTIFY when it is set here (the
environment, else the repo's .env), through Apprise, as the host does. A failure is one line, with
every part of the target taken out; it never stops the wait.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pippa_contract.alerts import TARGET, redact


def local_target(env_file: Path | None = None) -> str | None:
    """PIPPA_NOTIFY from this process's environment, else from the repo's .env (None: not set)."""
    value = os.environ.get(TARGET)
    if value:
        return value
    try:
        from pippa_ops.provision.envfile import read_env
        from pippa_ops.repo import fallback_root

        return read_env(env_file or fallback_root() / ".env").get(TARGET) or None
    except Exception:  # outside a repo, an unreadable .env: not set
        return None


def send(body: str, title: str = "pippa", target: str | None = None) -> str | None:
    """Send one message when PIPPA_NOTIFY is set here; None when sent or not set, else the error line."""
    target = target if target is not None else local_target()
    if not target:
        return None
    try:
        import apprise
    except ImportError:
        return "PIPPA_NOTIFY is set but Apprise is not installed here (pip install 'pippa[ops]')"
    notifier = apprise.Apprise()
    if not notifier.add(target):
        return "PIPPA_NOTIFY holds no Apprise URL it understands"
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:
        ok = bool(notifier.notify(body=body, title=title))
    if ok:
        return None
    lines = [ln for ln in logs.getvalue().splitlines() if ln.strip()]
    return redact(lines[-1] if lines else "the service refused the message", target)[:300]
