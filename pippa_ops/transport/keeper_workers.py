"""The keeper's threads for blocking work (reading a request, connecting, exec): at most ``most``,
started when work waits and none is idle, ended after ``idle_s`` without work.

concurrent.futures' pool keeps every thread it ever started: a keeper holding 64 hosts kept 8 idle
workers beside paramiko's 64 transport threads. Nothing here returns a result: the work reports
itself (an answer on the client's socket, a connection in the pool).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

Work = Callable[[], None]


class Workers:
    def __init__(self, most: int, idle_s: float = 2.0, name: str = "keeper-work") -> None:
        self.most, self.idle_s, self.name = most, idle_s, name
        self._queue: queue.SimpleQueue[Work] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = self._idle = 0
        self._closed = False

    @property
    def live(self) -> int:
        return self._live

    def submit(self, work: Work) -> None:
        with self._lock:
            if self._closed:
                return
            self._queue.put(work)
            if self._queue.qsize() > self._idle and self._live < self.most:
                self._live += 1
                threading.Thread(target=self._run, name=f"{self.name}-{self._live}", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                work = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:  # submit puts under this lock: an empty queue here stays seen
                    self._idle -= 1
                    if self._queue.empty() or self._closed:
                        self._live -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            with contextlib.suppress(Exception):  # as a pool's unread future: the work reports itself
                work()

    def shutdown(self) -> None:
        """Start nothing more; work not started yet is dropped."""
        with self._lock:
            self._closed = True
            with contextlib.suppress(queue.Empty):
                while True:
                    self._queue.get_nowait()
