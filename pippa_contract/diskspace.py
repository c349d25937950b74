"""A full disk (ENOSPC) or a spent quota (EDQUOT) on the host: how every writer tells it, the one line
that says it, and the reserve that lets the supervisor record it.

A writer that meets one of these errors does not die of it: it says ``disk full: writing <path>:
No space left on device (0 B free on <mount>)`` (``line``) and ends its work as it can. The host
supervisor keeps a small ``reserve`` file in the run directory from the start, and deletes it when a
write of its own finds the disk full, so the attempt's record, its end and ``exit_code`` still fit.
Python >= 3.8, standard library only (the supervisor, the agent, the alerts and the trainer use it)."""

from __future__ import annotations

import contextlib
import errno
import os

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Free bytes under which the run's file system counts as full when an attempt ends with an error.
FULL_BELOW = 1 << 20
RESERVE = ".pippa-reserve"  # in the run directory, while its supervisor runs
RESERVE_BYTES = 256 << 10  # attempts.json, its journal line, the banner lines, exit_code


def is_full(e: BaseException) -> bool:
    """An OSError that says the disk (or the user's quota) is full."""
    return isinstance(e, OSError) and e.errno in FULL_ERRNOS


def size_text(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def mount_of(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s file system (None: cannot tell)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def free_text(path: str) -> str:
    """``12.0 KB free on /mnt/data``."""
    free = free_bytes(path)
    where = mount_of(path)
    return f"free space unknown on {where}" if free is None else f"{size_text(free)} free on {where}"


def line(path: str, e: BaseException | None = None) -> str:
    """``disk full: writing <path>: No space left on device (0 B free on /mnt)``: the one line."""
    why = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else "No space left on device"
    return f"disk full: writing {path}: {why} ({free_text(os.path.dirname(path) or '.')})"


class Reserve:
    """``RESERVE_BYTES`` of real blocks in ``directory``, given back with ``release`` when a write that
    must happen finds the disk full. Creating it on a disk already full leaves none (no error)."""

    def __init__(self, directory: str, size: int = RESERVE_BYTES) -> None:
        self.path = os.path.join(directory, RESERVE)
        self.held = False
        try:
            with open(self.path, "wb") as f:
                f.write(b"\0" * size)  # written, not truncated: a sparse file would reserve nothing
            self.held = True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def release(self) -> bool:
        """Give the space back; False when there was none to give."""
        held, self.held = self.held, False
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        return held
