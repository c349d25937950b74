"""The supervisor's job as a tree of processes: its group (``os.killpg``) and everything below it
(torchrun starts each rank in a session of its own, outside the job's group), stopped or not.
Standard library only, python3 >= 3.8."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from pippa_agent import forensics

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    Child = Optional[subprocess.Popen]  # type: ignore[type-arg]


def signal_group(child: Child, sig: int) -> None:
    if child is not None:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, sig)


def signal_tree(child: Child, sig: int) -> None:
    """``sig`` to the job's group and to every process below the job."""
    below = forensics.descendants(child.pid) if child is not None else []
    signal_group(child, sig)
    for pid in below:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def end(child: subprocess.Popen, grace_s: float) -> int:  # type: ignore[type-arg]
    """SIGINT the job's group (the trainer saves), SIGCONT (a stopped one cannot), wait ``grace_s``,
    then SIGKILL what is left; the job's exit status as the shell sees it."""
    signal_group(child, signal.SIGINT)
    signal_tree(child, signal.SIGCONT)
    try:
        return int(child.wait(timeout=grace_s))
    except subprocess.TimeoutExpired:
        signal_tree(child, signal.SIGKILL)
        return int(child.wait())


def stopped(child: Child) -> str | None:
    """``its job is stopped (pid P, ...)`` when a process of the job is stopped, else None."""
    for pid in forensics.descendants(child.pid) if child is not None else []:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
            if stat[stat.rfind(")") + 2 :][:1] in ("T", "t"):
                return f"its job is stopped (pid {pid}, state T: SIGSTOP or a debugger)"
    return None
