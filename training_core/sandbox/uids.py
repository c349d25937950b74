"""The unprivileged uids that ``bwrap-root`` sandboxes run under, one per concurrent run."""

from __future__ import annotations

import socket
import threading

# Unprivileged uids handed to concurrent sandboxes, one each, so RLIMIT_NPROC counts per sandbox
# (the kernel counts processes per real uid). Each trainer process claims its own range of UID_COUNT,
# so two trainers on one host never share a uid. The ranges sit in 2,000,000,000 + k * UID_COUNT:
# above login users, systemd's dynamic (61184-65519) and container (524288-1879048191) uids, below
# 2^31 (some tools read uids as signed) and systemd's foreign range (0x7FFE0000).
UID_BASE = 2_000_000_000
UID_COUNT = 512
UID_RANGES = 256


class UidAllocator:
    """Hands out distinct sandbox uids to concurrent runs (thread-safe) from a range this process owns.

    The range is claimed on first use by binding an abstract unix socket named after it: the kernel
    frees the name when the process exits, however it exits, and another trainer in the same network
    namespace (the host's) cannot bind it meanwhile. The sandboxes themselves have their own network
    namespace, so they cannot squat a name."""

    def __init__(self, base: int = UID_BASE, count: int = UID_COUNT, ranges: int = UID_RANGES) -> None:
        self.base, self.count, self.ranges = base, count, ranges
        self._claim: socket.socket | None = None
        self._first = -1
        self._free: list[int] = []
        self._cond = threading.Condition()

    def _claimed(self) -> int:
        """The first uid of this process's range (claiming it the first time)."""
        if self._claim is None:
            for k in range(self.ranges):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.bind(f"\0pippa-sandbox-uids-{self.base}-{k}")
                except OSError:
                    s.close()
                    continue
                self._claim, self._first = s, self.base + k * self.count
                # the last uid is the probes' (``detect``), the rest are handed out
                self._free = list(range(self._first + self.count - 2, self._first - 1, -1))
                break
            else:
                raise OSError(f"all {self.ranges} sandbox uid ranges are held by other processes")
        return self._first

    @property
    def uid_range(self) -> range:
        with self._cond:
            first = self._claimed()
        return range(first, first + self.count)

    @property
    def probe_uid(self) -> int:
        return self.uid_range[-1]

    def acquire(self) -> int:
        with self._cond:
            self._claimed()
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append(uid)
            self._cond.notify()


UIDS = UidAllocator()
