"""The tests' leak check: whether a secret shows up in any process's argv while some work runs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def watching_argv(secret: str, fn: Callable[[], T], every_s: float = 0.01) -> tuple[T, bool]:
    """``(fn(), seen)``: ``seen`` when ``secret`` was in some process's command line during ``fn``.

    Sweeps /proc every ``every_s`` rather than in a tight loop, which would take a core from the work
    it watches; a process living less than that between sweeps can be missed."""
    seen = threading.Event()
    done = threading.Event()
    needle = secret.encode()

    def scan() -> None:
        while not done.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                            seen.set()
                    except OSError:
                        pass
            done.wait(every_s)

    t = threading.Thread(target=scan, daemon=True)
    t.start()
    try:
        return fn(), seen.is_set()
    finally:
        done.set()
        t.join()
