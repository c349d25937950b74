"""Telling the user that a run ended: a terminal bell and one line, and a desktop notification
where this machine has a way to show one (notify-send on Linux desktops, osascript on macOS).

The message reaches those tools as an argument list (no shell); osascript gets it as an AppleScript
string literal with its quotes and backslashes escaped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TextIO

TITLE = "pippa"


def bell_line(message: str, stream: TextIO | None = None) -> None:
    """BEL and ``pippa: message`` on stderr (a closed terminal is not an error: the run still ended)."""
    out = stream if stream is not None else sys.stderr
    try:
        out.write(f"\a{TITLE}: {message}\n")
        out.flush()
    except (OSError, ValueError):
        pass


def desktop_argv(title: str, body: str) -> list[str] | None:
    """The command that shows a desktop notification here, or None where there is none."""
    if sys.platform == "darwin" and shutil.which("osascript"):

        def quote(s: str) -> str:
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

        return ["osascript", "-e", f"display notification {quote(body)} with title {quote(title)}"]
    has_desktop = any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"))
    notify_send = shutil.which("notify-send")
    if notify_send and has_desktop:
        return [notify_send, "--app-name", TITLE, title, body]
    return None


def desktop(body: str, title: str = TITLE) -> bool:
    """Show a desktop notification if this machine can; whether one was shown."""
    argv = desktop_argv(title, body)
    if argv is None:
        return False
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_ended(message: str, stream: TextIO | None = None) -> None:
    """Everything the user gets when a run ends: bell, line, desktop notification, and PIPPA_NOTIFY
    where it is set here (pippa_ops.alerts.local)."""
    bell_line(message, stream)
    desktop(message)
    from pippa_ops.alerts.local import send

    error = send(message)
    if error is not None:
        bell_line(f"alert to PIPPA_NOTIFY failed: {error}", stream)
