"""The supervisor's reading and writing of the run's files, and the child process's set-up.

Python >= 3.8, standard library and pippa_contract only."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import sys
import termios
import time
from typing import Any, Callable

from pippa_agent.attempt_facts import log_tail as tail_text
from pippa_contract import runfacts

POLL_S = 0.5


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
    """Why the attempt that started at byte ``start`` of output.log ended (the contract's one rule)."""
    return runfacts.reason_line(tail_text(log, start))


def last_metrics(path: str) -> tuple[float | None, dict[str, Any] | None]:
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


def say(message: str) -> None:
    """A line of the supervisor's in output.log (through the pane's tee)."""
    try:
        sys.stdout.write(f"pippa: {message}\n")
        sys.stdout.flush()
    except OSError:
        pass  # the pane and its tee are gone (a hang-up): the record is what counts


def stalled_for(recipe: object, metrics: str, log: str, attempt: dict[str, Any]) -> float:
    """Seconds since the attempt's last progress; 0 before its first step (model download and
    start-up never count). A recipe run's progress is a metrics line, a command's its output."""
    now = time.time()
    if recipe is not None:
        newest, _ = last_metrics(metrics)
        if newest is None or newest < attempt["start"]:
            return 0.0
        try:
            return now - max(newest, os.path.getmtime(metrics))
        except OSError:
            return 0.0
    if file_size(log) <= attempt["log_offset"]:
        return 0.0
    try:
        return now - os.path.getmtime(log)
    except OSError:
        return 0.0
