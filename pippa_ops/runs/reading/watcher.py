"""The background watcher of ``pippa run --notify``: ``pippa wait RUN... --notify`` detached from the
command that started it, its log, and the same notice after ``run --follow`` (the runs have ended)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def watcher_log(run_id: str) -> Path:
    """Where the background watcher of ``run_id`` writes its notes (the user's cache directory)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pippa" / "watchers"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base / f"{run_id}.log"


def spawn_watcher(host: str, run_ids: list[str]) -> int:
    """``pippa wait RUN... --host H --notify`` detached from this command (its own session, so the
    shell's Ctrl-C and hang-up leave it alone). Its notes (reconnects) go to ``watcher_log``; only
    its final line and the bell reach this terminal's stderr, when that is a terminal: a pipe it
    would hold open (``out=$(pippa run --notify ...)`` would wait for the run), so then only the
    desktop notification tells. Its pid."""
    log = watcher_log(run_ids[0])
    argv = [
        sys.executable,
        "-m",
        "pippa_ops.cli.app",
        "wait",
        *run_ids,
        "--host",
        host,
        "--notify",
        "--log",
        str(log),
    ]
    stderr = None if sys.stderr.isatty() else subprocess.DEVNULL
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
    )
    return proc.pid


def notify_ended(host: str, run_ids: list[str], note: Callable[[str], None]) -> None:
    """Tell the user how runs ended (after ``run --follow``: they have, so this returns at once)."""
    from pippa_ops import notify as notices
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.reading.wait import ended_line, wait_runs

    wait_runs(locate(run_ids, host), on_end=lambda rec: notices.run_ended(ended_line(rec)), note=note)
